import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { DomainError } from "../domain/errors.js";

/**
 * A service whose RPCs are declared in the contract but not built yet: each
 * answers UNIMPLEMENTED (REST 501) naming itself.
 */
export function unimplementedService<S extends DescService>(service: S): ServiceImpl<S> {
  const impl: Record<string, () => never> = {};
  for (const method of service.methods) {
    impl[method.localName] = () => {
      throw new DomainError("unimplemented", `${service.typeName}.${method.name} is not implemented yet`);
    };
  }
  return impl as unknown as ServiceImpl<S>;
}
