package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestPublishTemplateRace builds one template from several goroutines at
// once, as parallel test binaries do: every caller must succeed and exactly
// one database must remain, with no half-built leftovers.
func TestPublishTemplateRace(t *testing.T) {
	PostgresURL(t) // starts or finds the server
	ctx := context.Background()
	name := "sluice_tpl_race_" + randomSuffix(t, 6)
	t.Cleanup(func() {
		_ = pgInst.exec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize()))
	})

	const callers = 4
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pgInst.publishTemplate(ctx, name)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}

	conn, err := pgx.Connect(ctx, pgInst.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1 || '%' ORDER BY 1", name)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != name {
		t.Errorf("databases after the race: %v, want exactly [%s]", names, name)
	}
	var tables int
	u, _ := withDatabase(pgInst.adminURL, name)
	tconn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer tconn.Close(ctx)
	if err := tconn.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'plans'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 1 {
		t.Errorf("published template has %d plans tables, want 1 (migrated)", tables)
	}
}
