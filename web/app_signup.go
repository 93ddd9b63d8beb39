package web

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// signUpPerIP limits account creation per client address with Sluice's own
// engine: enough for a team behind one NAT, too few for a script filling the
// users table.
var signUpPerIP = enforce.Limit{
	Name: "signup-ip", Algorithm: enforce.SlidingWindowLog,
	Limit: 5, Window: time.Hour, Mode: enforce.ModeReject,
}

func (s *Server) signUpForm(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.currentUser(r); ok {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	f := views.SignUpForm{Errors: views.FieldErrors{}, Mail: s.accountMail()}
	if p, err := s.defaultPlan(r); err == nil {
		f.Plan, f.Chosen = p.Name, p.ID
	}
	var err error
	if f.Choices, err = s.signUpChoices(r); err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.SignUp(s.page(r, "Sign up", "signup"), f))
}

// signUpChoices are the plans a developer may pick at sign-up: the public
// ones (the anonymous plan is for callers without a key).
func (s *Server) signUpChoices(r *http.Request) ([]views.PlanChoice, error) {
	all, err := s.deps.Plans.List(r.Context())
	if err != nil {
		return nil, fmt.Errorf("list plans: %w", err)
	}
	var out []views.PlanChoice
	for _, p := range all {
		if (p.IsPublic || p.IsDefault) && !p.IsAnonymous && p.Offered() {
			out = append(out, views.PlanChoice{ID: p.ID, Name: p.Name})
		}
	}
	return out, nil
}

// defaultPlan is the plan marked for new developers.
func (s *Server) defaultPlan(r *http.Request) (plans.Plan, error) {
	all, err := s.deps.Plans.List(r.Context())
	if err != nil {
		return plans.Plan{}, fmt.Errorf("list plans: %w", err)
	}
	for _, p := range all {
		if p.IsDefault {
			return p, nil
		}
	}
	return plans.Plan{}, plans.ErrNotFound
}

// signUp validates the form, spends one sign-up from the address's budget
// and creates the developer on the default plan, then sends them to sign
// in. A registered address gets the same answer and changes nothing.
func (s *Server) signUp(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := views.SignUpForm{Email: strings.TrimSpace(r.PostFormValue("email")), Errors: views.FieldErrors{}, Mail: s.accountMail()}
	password := r.PostFormValue("password")
	page := s.page(r, "Sign up", "signup")
	def, err := s.defaultPlan(r)
	if err != nil && !errors.Is(err, plans.ErrNotFound) {
		s.error(w, r, err)
		return
	}
	f.Plan, f.Chosen = def.Name, def.ID
	if f.Choices, err = s.signUpChoices(r); err != nil {
		s.error(w, r, err)
		return
	}
	// A chosen plan must be one offered; none chosen is the default.
	if v := r.PostFormValue("plan_id"); v != "" {
		id, _ := strconv.ParseInt(v, 10, 64)
		i := slices.IndexFunc(f.Choices, func(c views.PlanChoice) bool { return c.ID == id })
		if i < 0 {
			f.Errors["plan_id"] = "is not a plan you can choose"
		} else {
			f.Chosen, f.Plan = id, f.Choices[i].Name
		}
	}

	if fe := users.ValidateSignup(f.Email, password); fe != nil || len(f.Errors) > 0 {
		for k, v := range fe {
			f.Errors[k] = v
		}
		s.render(w, r, http.StatusUnprocessableEntity, views.SignUp(page, f))
		return
	}
	// Only well-formed attempts spend the budget, so typos do not lock
	// anyone out.
	wait, err := s.signUpAllowed(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if wait > 0 {
		f.Limited = fmt.Sprintf("Too many sign-ups from your address. Try again in %s.", humanWait(wait))
		w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		s.render(w, r, http.StatusTooManyRequests, views.SignUp(page, f))
		return
	}
	if f.Chosen == 0 {
		f.Errors["form"] = "Sign-up is closed: no plan is marked for new developers. Ask the operator."
		s.render(w, r, http.StatusServiceUnavailable, views.SignUp(page, f))
		return
	}
	if s.accountMail() {
		s.signUpByMail(w, r, page, f, password)
		return
	}
	u, err := s.deps.Users.Create(r.Context(), users.NewUser{
		Email: f.Email, Password: password, Role: users.RoleDeveloper, PlanID: &f.Chosen,
	})
	var fe users.FieldErrors
	switch {
	case errors.Is(err, users.ErrEmailTaken):
		// The answer is the one a new address gets, after the same work
		// (the password was hashed before the insert was refused): the
		// form must not tell who has an account. Nothing changes.
		s.log.Info("sign-up for a registered address: nothing done")
	case errors.As(err, &fe):
		for k, v := range fe {
			f.Errors[k] = v
		}
		s.render(w, r, http.StatusUnprocessableEntity, views.SignUp(page, f))
		return
	case err != nil:
		s.error(w, r, err)
		return
	default:
		s.log.Info("developer signed up", "user_id", u.ID, "plan_id", f.Chosen)
	}
	// Nobody is signed in by the answer, new address or not: a session
	// cookie on one answer only would tell them apart.
	http.Redirect(w, r, "/signin?signed_up=1&next=%2Fapp%2Fkeys", http.StatusSeeOther)
}

// signUpAllowed spends one sign-up of the client address's budget and says
// how long to wait when it is spent. Counted by address block (an IPv6 /64
// by default), as sign-in and anonymous API callers are: one subscriber
// cannot rotate addresses.
func (s *Server) signUpAllowed(r *http.Request) (time.Duration, error) {
	ip := httplimit.ClientIP(r, s.deps.TrustedProxies)
	return s.spend(r, "signup:"+s.deps.SignIn.Blocks.Subject(ip), "POST /signup", signUpPerIP)
}
