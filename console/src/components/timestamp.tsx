import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

/** A protobuf timestamp as a <time> element, in the reader's locale. */
export function When({ ts }: { ts: Timestamp | undefined }) {
  if (ts === undefined) return null;
  const date = timestampDate(ts);
  return (
    <time dateTime={date.toISOString()} title={date.toISOString()}>
      {date.toLocaleString()}
    </time>
  );
}
