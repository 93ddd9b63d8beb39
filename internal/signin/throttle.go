// Package signin slows down password guessing without letting anyone lock
// an account, nor keep its owner out. Only failed sign-ins are counted, in
// Postgres so every portal instance shares them, under these subjects:
//
//   - per address: one address may fail at most AddressFailures times per
//     Window, whatever accounts it tries (a guesser working through emails);
//   - per (account, address) pair: one address may fail on one account at
//     most PairFailures times per Window (a guesser on one account);
//   - per account, from unknown clients: after AccountFreeFailures failures
//     each further attempt must wait twice as long as the previous one, from
//     one second up to AccountMaxDelay. This is a slowdown, never a lock;
//   - per device: a browser that signed in to the account before carries a
//     device token (see Devices); its attempts may fail PairFailures times
//     per Window, counted under the device alone.
//
// The owner is told apart from a guesser by what a guesser does not have:
// an attempt from a known device (within its own budget) passes every other
// limit, and an attempt from a known address (one the account signed in
// from with its right password, within KnownFor) passes the account's
// slowdown. So guesses from any number of addresses, at any rate, slow down
// only the attempts of unknown clients: the owner's browser and network
// sign in every time.
//
// Each attempt is counted as a failure before the password is checked
// (Attempt), under locks that serialise the attempts on one address, one
// account and one device, so a burst of parallel guesses cannot all pass
// the check before any of them is counted. A successful sign-in gives its
// count back (Succeeded) and remembers the address: it clears its pair (and
// the account's count, for an unknown client) or its device count, and
// takes its own attempt off the address count, leaving the address's other
// failures alone, so one valid account does not let an address reset the
// budget it spends guessing at others.
package signin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluicehq/sluice/internal/enforce"
)

// Policy is how many failures are tolerated. The zero value is not usable;
// start from DefaultPolicy().
type Policy struct {
	// AddressFailures is how many failed sign-ins one address may make per
	// Window across all accounts.
	AddressFailures int
	// PairFailures is how many failed sign-ins one address may make per
	// Window on one account.
	PairFailures int
	// Window is the counting window of the address and pair limits.
	Window time.Duration
	// AccountFreeFailures is how many failures an account takes, from any
	// address, before its attempts are spaced out.
	AccountFreeFailures int
	// AccountMaxDelay caps the spacing between attempts on one account.
	AccountMaxDelay time.Duration
	// Blocks are the address blocks one client is counted as, the same as
	// for anonymous API callers (PORTAL_ANON_IPV4_PREFIX and
	// PORTAL_ANON_IPV6_PREFIX; the zero value: an IPv4 address, an IPv6 /64).
	Blocks enforce.AddressPrefixes
}

// DefaultPolicy is what the portal uses unless configured otherwise.
func DefaultPolicy() Policy {
	return Policy{
		AddressFailures:     30,
		PairFailures:        10,
		Window:              15 * time.Minute,
		AccountFreeFailures: 5,
		AccountMaxDelay:     time.Minute,
	}
}

// accountForget is how long an account's failures are remembered after the
// last one: a day without failures starts the spacing over.
const accountForget = 24 * time.Hour

// KnownFor is how long after its last successful sign-in from an address
// block that block counts as known for the account.
const KnownFor = 90 * 24 * time.Hour

// Validate reports the first setting out of range.
func (p Policy) Validate() error {
	switch {
	case p.AddressFailures < 1:
		return errors.New("address failures must be at least 1")
	case p.PairFailures < 1:
		return errors.New("pair failures must be at least 1")
	case p.Window < time.Second:
		return errors.New("window must be at least 1s")
	case p.AccountFreeFailures < 1:
		return errors.New("account free failures must be at least 1")
	case p.AccountMaxDelay < time.Second:
		return errors.New("account max delay must be at least 1s")
	}
	return nil
}

// DBTX is the part of pgx the throttle needs.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// querier is what one read needs: the pool or an attempt's transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Throttle counts failed sign-ins and says how long an attempt must wait.
type Throttle struct {
	db     DBTX
	policy Policy
	now    func() time.Time
}

// New returns a throttle storing its counts in db; now nil means time.Now.
func New(db DBTX, policy Policy, now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{db: db, policy: policy, now: now}
}

// AddressKey names the client addr is counted as: its address block under
// blocks (an IPv4 address, the /64 of an IPv6 address by default: one
// subscriber usually holds a whole /64, so counting single IPv6 addresses
// would hand a guesser billions of budgets), as anonymous API callers are.
func AddressKey(addr netip.Addr, blocks enforce.AddressPrefixes) string {
	return blocks.Subject(addr)
}

// Client is who attempts a sign-in.
type Client struct {
	// Addr is the client's address (see enforce.ClientIP).
	Addr netip.Addr
	// Device is the id of the browser's valid device token for the account
	// (Devices.Device), "" for a browser that never signed in to it.
	Device string
}

type subjects struct{ address, pair, account, device []byte }

// subjectsOf names the counters. Hashes keep emails, addresses and device
// ids out of the tables; the email is compared case-insensitively, as
// sign-in does.
func (t *Throttle) subjectsOf(email string, c Client) subjects {
	h := func(parts ...string) []byte {
		sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
		return sum[:]
	}
	acct := normalEmail(email)
	a := AddressKey(c.Addr, t.policy.Blocks)
	s := subjects{address: h("address", a), pair: h("pair", acct, a), account: h("account", acct)}
	if c.Device != "" {
		s.device = h("device", acct, c.Device)
	}
	return s
}

// path is how an attempt is judged and counted.
type path int

const (
	// unknownClient: every limit, counted under address, pair and account.
	unknownClient path = iota
	// knownAddress: the address and pair limits, counted under both.
	knownAddress
	// knownDevice: the device's own limit, counted under the device.
	knownDevice
)

// Pass is an attempt Attempt let through, counted as a failure: give it to
// Succeeded when the password was right.
type Pass struct {
	s    subjects
	path path
}

// standing is what the counters say about one attempt.
type standing struct {
	address, pair, account, device time.Duration
	known                          bool
}

// judge picks the attempt's path and how long it must wait.
func (st standing) judge(s subjects) (path, time.Duration) {
	switch {
	case s.device != nil && st.device == 0:
		return knownDevice, 0
	case st.known:
		return knownAddress, max(st.address, st.pair)
	}
	return unknownClient, max(st.address, st.pair, st.account)
}

const selectFailures = `
SELECT scope, failures, first_at, last_at FROM signin_failures
WHERE (scope, subject) IN (('address', $1::bytea), ('pair', $2::bytea), ('account', $3::bytea), ('device', $4::bytea))
UNION ALL
SELECT 'known', 1, last_success_at, last_success_at FROM signin_known_addresses
WHERE account = $3 AND address = $1 AND last_success_at > $5`

// Wait returns how long an attempt by c to sign in to email would have to
// wait (0: none). It counts nothing.
func (t *Throttle) Wait(ctx context.Context, email string, c Client) (time.Duration, error) {
	s := t.subjectsOf(email, c)
	st, err := t.standing(ctx, t.db, s)
	if err != nil {
		return 0, err
	}
	_, wait := st.judge(s)
	return wait, nil
}

// lockSubject serialises attempts on one subject until the transaction
// ends. The address is always locked before the account, so two attempts
// never wait for each other in a cycle.
const lockSubject = `SELECT pg_advisory_xact_lock($1)`

// Attempt starts an attempt by c to sign in to email. When it must wait,
// it returns how long and counts nothing. Otherwise it returns a Pass and 0
// and counts the attempt as a failure at once; call Succeeded with the Pass
// if the password was right.
func (t *Throttle) Attempt(ctx context.Context, email string, c Client) (Pass, time.Duration, error) {
	s := t.subjectsOf(email, c)
	var wait time.Duration
	pass := Pass{s: s}
	err := pgx.BeginFunc(ctx, t.db, func(tx pgx.Tx) error {
		for _, subject := range [][]byte{s.address, s.account, s.device} {
			if subject == nil {
				continue
			}
			if _, err := tx.Exec(ctx, lockSubject, lockKey(subject)); err != nil {
				return err
			}
		}
		st, err := t.standing(ctx, tx, s)
		if err != nil {
			return err
		}
		if pass.path, wait = st.judge(s); wait > 0 {
			return nil
		}
		return t.record(ctx, tx, pass)
	})
	if err != nil {
		return Pass{}, 0, fmt.Errorf("sign-in throttle: %w", err)
	}
	return pass, wait, nil
}

// lockKey is an advisory lock number for a subject hash.
func lockKey(subject []byte) int64 {
	var k int64
	for _, b := range subject[:8] {
		k = k<<8 | int64(b)
	}
	return k
}

func (t *Throttle) standing(ctx context.Context, db querier, s subjects) (standing, error) {
	now := t.now()
	rows, err := db.Query(ctx, selectFailures, s.address, s.pair, s.account, s.device, now.Add(-KnownFor))
	if err != nil {
		return standing{}, fmt.Errorf("sign-in throttle: %w", err)
	}
	type row struct {
		scope           string
		failures        int
		firstAt, lastAt time.Time
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.scope, &x.failures, &x.firstAt, &x.lastAt)
		return x, err
	})
	if err != nil {
		return standing{}, fmt.Errorf("sign-in throttle: %w", err)
	}
	var st standing
	for _, x := range list {
		switch x.scope {
		case "address":
			st.address = t.windowWait(x.failures, t.policy.AddressFailures, x.firstAt, now)
		case "pair":
			st.pair = t.windowWait(x.failures, t.policy.PairFailures, x.firstAt, now)
		case "account":
			st.account = t.accountWait(x.failures, x.lastAt, now)
		case "device":
			st.device = t.windowWait(x.failures, t.policy.PairFailures, x.firstAt, now)
		case "known":
			st.known = true
		}
	}
	return st, nil
}

func (t *Throttle) windowWait(failures, allowed int, firstAt, now time.Time) time.Duration {
	end := firstAt.Add(t.policy.Window)
	if failures < allowed || !now.Before(end) {
		return 0
	}
	return end.Sub(now)
}

// AccountDelay is the spacing required after an account's failures-th
// failure: nothing up to AccountFreeFailures, then 1s, 2s, 4s... capped at
// AccountMaxDelay.
func (p Policy) AccountDelay(failures int) time.Duration {
	over := failures - p.AccountFreeFailures
	if over < 0 {
		return 0
	}
	if over >= 30 {
		return p.AccountMaxDelay
	}
	return min(time.Second<<over, p.AccountMaxDelay)
}

func (t *Throttle) accountWait(failures int, lastAt, now time.Time) time.Duration {
	if now.Sub(lastAt) >= accountForget {
		return 0
	}
	return max(lastAt.Add(t.policy.AccountDelay(failures)).Sub(now), 0)
}

// recordFailure adds one failure to a subject. A window that has ended
// starts over (windowed scopes); an account forgotten for a day too.
const recordFailure = `
INSERT INTO signin_failures (scope, subject, failures, first_at, last_at)
VALUES ($1, $2, 1, $3, $3)
ON CONFLICT (scope, subject) DO UPDATE SET
    failures = CASE WHEN signin_failures.first_at <= $3 - $4::interval THEN 1
                    ELSE signin_failures.failures + 1 END,
    first_at = CASE WHEN signin_failures.first_at <= $3 - $4::interval THEN $3
                    ELSE signin_failures.first_at END,
    last_at  = $3`

// pruneFailures forgets counts nobody looks at any more, so a flood of
// failures with made-up emails does not grow the table without end.
const pruneFailures = `DELETE FROM signin_failures WHERE last_at < $1`

type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// record counts one failure under each subject of the attempt's path.
func (t *Throttle) record(ctx context.Context, db batchSender, p Pass) error {
	now := t.now()
	b := &pgx.Batch{}
	switch p.path {
	case knownDevice:
		b.Queue(recordFailure, "device", p.s.device, now, t.policy.Window)
	default:
		b.Queue(recordFailure, "address", p.s.address, now, t.policy.Window)
		b.Queue(recordFailure, "pair", p.s.pair, now, t.policy.Window)
	}
	if p.path == unknownClient {
		// An account's window is a day from its first failure: it is
		// spaced out by its last failure, and forgotten after a day of
		// quiet.
		b.Queue(recordFailure, "account", p.s.account, now, accountForget)
	}
	b.Queue(pruneFailures, now.Add(-max(t.policy.Window, accountForget)))
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record failure: %w", err)
	}
	return nil
}

const (
	clearFailure = `DELETE FROM signin_failures WHERE scope = $1 AND subject = $2`
	// The address's count loses this attempt only: the row goes when it
	// was the last, else it is decremented.
	dropLastAddressFailure = `DELETE FROM signin_failures WHERE scope = 'address' AND subject = $1 AND failures <= 1`
	takeBackAddressFailure = `UPDATE signin_failures SET failures = failures - 1 WHERE scope = 'address' AND subject = $1`
	rememberAddress        = `
INSERT INTO signin_known_addresses (account, address, last_success_at) VALUES ($1, $2, $3)
ON CONFLICT (account, address) DO UPDATE SET last_success_at = EXCLUDED.last_success_at`
	forgetAddresses = `DELETE FROM signin_known_addresses WHERE last_success_at < $1`
)

// Succeeded records that the attempt p had the right password: what it
// counted is given back (the device's failures cleared; or the pair's,
// and the account's for an unknown client, cleared and the attempt taken
// off the address's count), and the address becomes known to the account.
func (t *Throttle) Succeeded(ctx context.Context, p Pass) error {
	now := t.now()
	b := &pgx.Batch{}
	switch p.path {
	case knownDevice:
		b.Queue(clearFailure, "device", p.s.device)
	case unknownClient:
		b.Queue(clearFailure, "account", p.s.account)
		fallthrough
	default:
		b.Queue(clearFailure, "pair", p.s.pair)
		b.Queue(dropLastAddressFailure, p.s.address)
		b.Queue(takeBackAddressFailure, p.s.address)
	}
	b.Queue(rememberAddress, p.s.account, p.s.address, now)
	b.Queue(forgetAddresses, now.Add(-KnownFor))
	// One implicit transaction: a batch runs as one unless it says otherwise.
	if err := t.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("sign-in throttle: clear: %w", err)
	}
	return nil
}
