/**
 * An RFC 4180 record reader over bytes, incremental (push chunks, then end).
 *
 * CSV is read here rather than with a library: the console takes no CSV
 * dependency for one feature (it would weigh more in the bundle than the
 * rest of the import), and csv-parse 7.0.3, tried for the command line,
 * counts a CRLF inside a quoted field as two lines (every later line number
 * is then off by one), swallows every following row into one error after a
 * stray character behind a closing quote (skip_records_with_error), and ends
 * the parse silently after a record over max_record_size. Rows are reported
 * by line, so those matter.
 */

import { BomSkipper, bytesOf, Bytes, COMMA, CR, LF, lenient, NOT_UTF8, QUOTE, utf8, type ReadStart } from "./bytes.js";
import { MAX_RECORD_BYTES } from "./rows.js";

/** One CSV record: its fields, the line it starts on, a problem if it is broken, and where it ends. */
export interface CsvRecord {
  line: number;
  fields: string[];
  problem?: string;
  /** Byte offset just past the record and its line break, and the line that starts there. */
  end: number;
  nextLine: number;
}

/** The reader's states. */
const S = {
  /** Before a record. */
  Start: 0,
  /** At the start of a field. */
  Field: 1,
  Unquoted: 2,
  Quoted: 3,
  /** A quote inside a quoted field: a second one is a quote, anything else closes the field. */
  QuoteSeen: 4,
  /** Text after a closing quote (a mistake, kept in the field and reported). */
  Stray: 5,
  /** A record ended with CR: a LF right after belongs to it. */
  AfterCr: 6,
} as const;
type State = (typeof S)[keyof typeof S];

/**
 * RFC 4180 records, incrementally: fields split on commas; a field in double
 * quotes may hold commas, line breaks and "" (one quote); records end at
 * CRLF, LF or a lone CR. A quote inside an unquoted field is kept as it is
 * (as most readers do). Records that are empty or only white space are
 * skipped. Line breaks inside quotes count as lines, so a record's line is
 * the one it starts on.
 */
export class CsvRecordReader {
  private state: State = S.Start;
  private offset: number;
  private line: number;
  private readonly bom: BomSkipper;
  private readonly field = new Bytes();
  private fields: string[] = [];
  private recordLine = 0;
  private recordBytes = 0;
  private anyQuoted = false;
  private quoteLine = 0;
  private problem: string | undefined;
  private stray: number[] = [];
  private crInQuotes = false;
  private held: CsvRecord | undefined;

  constructor(
    start: ReadStart = { offset: 0, line: 1 },
    private readonly maxRecordBytes = MAX_RECORD_BYTES,
  ) {
    this.offset = start.offset;
    this.line = start.line;
    this.bom = new BomSkipper(start.offset === 0);
  }

  push(chunk: Uint8Array): CsvRecord[] {
    const out: CsvRecord[] = [];
    const { bytes, skipped } = this.bom.take(chunk, false);
    this.offset += skipped;
    this.read(bytes, out);
    return out;
  }

  /** The last record, once the input has ended. */
  end(): CsvRecord[] {
    const out: CsvRecord[] = [];
    const { bytes, skipped } = this.bom.take(new Uint8Array(0), true);
    this.offset += skipped;
    this.read(bytes, out);
    switch (this.state) {
      case S.AfterCr:
        this.emitHeld(out);
        break;
      case S.Start:
        break;
      case S.Quoted:
        this.problem ??= `the quoted field opened on line ${this.quoteLine} is never closed`;
        this.endRecord(out);
        break;
      default:
        this.endRecord(out);
    }
    this.state = S.Start;
    return out;
  }

  private read(bytes: Uint8Array, out: CsvRecord[]): void {
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i]!;
      if (this.state === S.AfterCr) {
        this.state = S.Start;
        if (b === LF) {
          this.offset++;
          this.emitHeld(out);
          continue;
        }
        this.emitHeld(out);
      }
      this.offset++;
      if (this.state === S.Start) {
        this.fields = [];
        this.recordLine = this.line;
        this.recordBytes = 0;
        this.anyQuoted = false;
        this.problem = undefined;
        this.state = S.Field;
      }
      if (++this.recordBytes === this.maxRecordBytes + 1) {
        this.problem ??=
          this.state === S.Quoted
            ? `the quoted field opened on line ${this.quoteLine} runs over ${this.maxRecordBytes} bytes (is it closed?)`
            : `the record is over ${this.maxRecordBytes} bytes`;
      }
      switch (this.state) {
        case S.Field:
          if (b === QUOTE) {
            this.anyQuoted = true;
            this.quoteLine = this.line;
            this.crInQuotes = false;
            this.state = S.Quoted;
          } else if (b === COMMA) this.endField();
          else if (b === CR || b === LF) this.lineBreak(b, out);
          else {
            this.append(b);
            this.state = S.Unquoted;
          }
          break;
        case S.Unquoted:
          if (b === COMMA) {
            this.endField();
            this.state = S.Field;
          } else if (b === CR || b === LF) this.lineBreak(b, out);
          else this.append(b);
          break;
        case S.Quoted:
          if (b === QUOTE) {
            this.state = S.QuoteSeen;
            break;
          }
          // A line break inside quotes is part of the field; CRLF counts once.
          if (b === CR || (b === LF && !this.crInQuotes)) this.line++;
          this.crInQuotes = b === CR;
          this.append(b);
          break;
        case S.QuoteSeen:
          if (b === QUOTE) {
            this.append(QUOTE);
            this.crInQuotes = false;
            this.state = S.Quoted;
          } else if (b === COMMA) {
            this.endField();
            this.state = S.Field;
          } else if (b === CR || b === LF) this.lineBreak(b, out);
          else {
            this.stray = [b];
            this.append(b);
            this.state = S.Stray;
          }
          break;
        case S.Stray:
          if (b === COMMA) {
            this.endField();
            this.state = S.Field;
          } else if (b === CR || b === LF) this.lineBreak(b, out);
          else {
            if (this.stray.length < 80) this.stray.push(b);
            this.append(b);
          }
          break;
      }
    }
  }

  private append(b: number): void {
    if (this.recordBytes <= this.maxRecordBytes) this.field.push(b);
  }

  private endField(): void {
    if (this.state === S.Stray) {
      const text = lenient.decode(Uint8Array.from(this.stray));
      this.problem ??= `text after a closing quote: ${JSON.stringify(text.slice(0, 20))}`;
    }
    const text = utf8(this.field.view());
    if (text === undefined) this.problem ??= NOT_UTF8;
    if (this.recordBytes <= this.maxRecordBytes) this.fields.push(text ?? lenient.decode(this.field.view()));
    this.field.length = 0;
  }

  /** A line break outside quotes ends the record (a CR waits for a LF that may follow). */
  private lineBreak(b: number, out: CsvRecord[]): void {
    this.endField();
    this.line++;
    const record = this.record();
    if (b === CR) {
      this.held = record;
      this.state = S.AfterCr;
    } else {
      this.state = S.Start;
      if (record !== undefined) out.push(record);
    }
  }

  /** The end of the input inside a record. */
  private endRecord(out: CsvRecord[]): void {
    this.endField();
    this.line++;
    const record = this.record();
    if (record !== undefined) out.push(record);
  }

  private emitHeld(out: CsvRecord[]): void {
    if (this.held !== undefined) out.push({ ...this.held, end: this.offset });
    this.held = undefined;
  }

  /** The record just read, or undefined for a blank one. */
  private record(): CsvRecord | undefined {
    const blank = !this.anyQuoted && this.fields.length === 1 && this.fields[0]!.trim() === "" && this.problem === undefined;
    if (blank) return undefined;
    return {
      line: this.recordLine,
      fields: this.fields,
      end: this.offset,
      nextLine: this.line,
      ...(this.problem === undefined ? {} : { problem: this.problem }),
    };
  }
}


/** Every record of a whole text or file (the console's reading; tests). */
export function readCsvRecords(input: string | Uint8Array): CsvRecord[] {
  const reader = new CsvRecordReader();
  return [...reader.push(bytesOf(input)), ...reader.end()];
}
