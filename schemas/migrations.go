package schemas

import "embed"

// Migrations are the SQL migrations, applied in file-name order by internal/pg.
//
//go:embed migrations/*.sql
var Migrations embed.FS
