import type { ButtonHTMLAttributes } from "react";

/**
 * Every button that deletes, removes, revokes or detaches, first step and
 * confirmation alike: one look (the "danger" class, used nowhere else), so a
 * destructive action reads the same on every page.
 */
export function DangerButton({ type = "button", ...props }: Omit<ButtonHTMLAttributes<HTMLButtonElement>, "className" | "type"> & { type?: "button" | "submit" }) {
  return <button {...props} type={type} className="danger" />;
}
