/** A plan's impact on one permission, as the model API answers it (API.md, "Plans"). */
export interface ImpactPair {
  userId: string;
  resourceId: string;
}

export interface PlanImpact {
  permission: string;
  gaining: number;
  losing: number;
  gainingSample: string[];
  losingSample: string[];
  gainingPairs: ImpactPair[];
  losingPairs: ImpactPair[];
  /** The counts are lower bounds: the plan's walk met its bound. */
  atLeast: boolean;
}
