// Package storetest holds test helpers that reach under the store's API to
// the schema version of a store file, for tests of what commands do with a
// store of another version.
package storetest

import (
	"database/sql"
	"testing"

	"github.com/rubick-sched/rubick/store" // registers the sqlite3 driver
)

// Older makes the store at path one at the schema version before this
// binary's, as far as its version says.
func Older(t testing.TB, path string) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM schema_migrations WHERE version = ?`, store.SchemaVersion()); err != nil {
		t.Fatal(err)
	}
}

// Version is the schema version of the store at path.
func Version(t testing.TB, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
