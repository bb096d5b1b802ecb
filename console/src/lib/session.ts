/**
 * The signed-in key. It lives in sessionStorage only: never in a URL, a
 * cookie, localStorage or a log, and it is gone when the tab closes or the
 * user signs out.
 */
const STORAGE_KEY = "portcullis.apiKey";

export function storedKey(): string | null {
  return sessionStorage.getItem(STORAGE_KEY);
}

export function storeKey(key: string): void {
  sessionStorage.setItem(STORAGE_KEY, key);
}

export function forgetKey(): void {
  sessionStorage.removeItem(STORAGE_KEY);
}
