// Package db holds Sluice's SQL migrations, embedded in the binary so that a
// single executable can create and upgrade its own schema.
package db

import "embed"

// Migrations holds the golang-migrate files (NNNNNN_name.up.sql and
// NNNNNN_name.down.sql) under the directory "migrations". Add a new pair with
// the next number to change the schema; never edit a released migration.
//
//go:embed migrations/*.sql
var Migrations embed.FS
