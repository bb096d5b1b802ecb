export declare const INITIAL_JS_LIMIT_BYTES: number;
export declare function initialJavaScript(dir: string): { files: string[]; gzipBytes: number };
