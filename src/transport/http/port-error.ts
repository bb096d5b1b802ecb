/**
 * A port that cannot be bound, said in one line that names the setting to
 * change: the service binds its ports before it opens the database, so this
 * is all a start on a busy port does.
 */
import { StartupError } from "../../lib/startup-error.js";

export interface PortSetting {
  /** The environment variables of the port and of its address, as the operator wrote them. */
  readonly portVariable: "PORT" | "METRICS_PORT";
  readonly hostVariable: "HOST" | "METRICS_HOST";
  readonly host: string;
  readonly port: number;
}

/** A StartupError for the errors an operator can fix; any other error as it is. */
export function portError(error: unknown, setting: PortSetting): unknown {
  const { portVariable, hostVariable, host, port } = setting;
  const at = `${host.includes(":") ? `[${host}]` : host}:${port}`;
  switch ((error as NodeJS.ErrnoException | undefined)?.code) {
    case "EADDRINUSE":
      return new StartupError(`${portVariable}=${port}: ${at} is already in use by another process; stop that process or set ${portVariable} to a free port`, { cause: error });
    case "EACCES":
      return new StartupError(`${portVariable}=${port}: this process may not listen on ${at} (ports below 1024 need privileges); set ${portVariable} to a port above 1023`, { cause: error });
    case "EADDRNOTAVAIL":
      return new StartupError(`${hostVariable}=${host}: not an address of this machine; set ${hostVariable} to one of its addresses (127.0.0.1, or 0.0.0.0 for all)`, { cause: error });
    default:
      return error;
  }
}
