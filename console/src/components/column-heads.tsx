/**
 * A table's head row: one column header a name, and with `actions` a last,
 * unnamed-on-screen column for the row's buttons (named "Actions" for screen
 * readers).
 */
export function ColumnHeads({ columns, actions = false }: { columns: readonly string[]; actions?: boolean }) {
  return (
    <thead>
      <tr>
        {columns.map((column) => (
          <th key={column} scope="col">
            {column}
          </th>
        ))}
        {actions && (
          <th scope="col">
            <span className="visually-hidden">Actions</span>
          </th>
        )}
      </tr>
    </thead>
  );
}
