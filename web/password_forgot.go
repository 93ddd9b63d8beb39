package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// Requests for a reset link are limited per client address block and per
// email asked about (registered or not, so the limit tells nothing): enough
// for someone retrying, too few to flood a mailbox.
var (
	forgotPerIP = enforce.Limit{
		Name: "forgot-ip", Algorithm: enforce.SlidingWindowLog,
		Limit: 10, Window: time.Hour, Mode: enforce.ModeReject,
	}
	forgotPerEmail = enforce.Limit{
		Name: "forgot-email", Algorithm: enforce.SlidingWindowLog,
		Limit: 3, Window: time.Hour, Mode: enforce.ModeReject,
	}
)

func (s *Server) forgotForm(w http.ResponseWriter, r *http.Request) {
	f := views.ForgotForm{Mail: s.accountMail(), Sent: r.URL.Query().Get("sent") == "1"}
	s.render(w, r, http.StatusOK, views.Forgot(s.page(r, "Forgot your password?", ""), f))
}

// forgot sends a one-time reset link to the email when it has an account,
// and answers the same either way, at once: the email is sent after the
// answer, so the time to answer does not tell either.
func (s *Server) forgot(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	page := s.page(r, "Forgot your password?", "")
	f := views.ForgotForm{Mail: s.accountMail(), Email: strings.TrimSpace(r.PostFormValue("email")), Errors: views.FieldErrors{}}
	if !f.Mail {
		s.render(w, r, http.StatusServiceUnavailable, views.Forgot(page, f))
		return
	}
	if msg := users.ValidateEmail(f.Email); msg != "" {
		f.Errors["email"] = msg
		s.render(w, r, http.StatusUnprocessableEntity, views.Forgot(page, f))
		return
	}
	ip := httplimit.ClientIP(r, s.deps.TrustedProxies)
	wait, err := s.spend(r, "forgot:"+s.deps.SignIn.Blocks.Subject(ip), "POST /password/forgot", forgotPerIP)
	if err == nil && wait == 0 {
		// The email is kept out of the counters' keys: its hash names it.
		sum := sha256.Sum256([]byte(strings.ToLower(f.Email)))
		wait, err = s.spend(r, "forgot-email:"+hex.EncodeToString(sum[:16]), "POST /password/forgot", forgotPerEmail)
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	if wait > 0 {
		f.Limited = fmt.Sprintf("Too many requests for a link. Try again in %s.", humanWait(wait))
		w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		s.render(w, r, http.StatusTooManyRequests, views.Forgot(page, f))
		return
	}
	u, err := s.deps.Users.ByEmail(r.Context(), f.Email)
	switch {
	case errors.Is(err, users.ErrNotFound):
		s.log.Info("reset link asked for an unknown email: nothing sent")
	case err != nil:
		s.error(w, r, err)
		return
	default:
		// The link is made after the answer too: its writes take time an
		// unknown email would not.
		s.inBackground("password reset link", func(ctx context.Context) error {
			token, expires, err := s.selfResets.Create(ctx, s.deps.Pool, fmt.Sprintf("user:%d", u.ID), u.ID)
			if err != nil {
				return err
			}
			if err := s.deps.Mailer.Send(ctx, resetMail(u.Email, s.link("/reset/"+token), expires)); err != nil {
				return err
			}
			s.log.Info("reset link emailed", "user_id", u.ID)
			return nil
		})
	}
	http.Redirect(w, r, "/password/forgot?sent=1", http.StatusSeeOther)
}

func resetMail(to, link string, expires time.Time) mail.Message {
	return mail.Message{To: to, Subject: "Reset your Sluice password", Body: fmt.Sprintf(
		"Someone, probably you, asked to reset the password of the Sluice account with this address.\n\n"+
			"Choose a new password here:\n\n%s\n\n"+
			"The link works once, until %s; a newer link or a password change ends it, and using it signs the account out everywhere.\n"+
			"If you did not ask, ignore this email: your password stays as it is.\n",
		link, expires.UTC().Format("2006-01-02 15:04 MST"))}
}
