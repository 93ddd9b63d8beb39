package testenv

import "errors"

// startEmbedded starts a Postgres server for this test binary alone.
func startEmbedded() (string, error) {
	return "", errors.New("no Postgres server found and embedded Postgres is not wired yet")
}
