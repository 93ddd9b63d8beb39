package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// orgNotices are the banners after an organisation change (?done=).
var orgNotices = map[string]string{
	"invited":  "Invitation sent.",
	"revoked":  "Invitation revoked.",
	"removed":  "Member removed: their access ended at once.",
	"role":     "Role changed.",
	"switched": "You now work in this organisation.",
	"joined":   "Welcome: you are now a member of this organisation.",
	"renamed":  "Organisation renamed.",
}

func (s *Server) orgPageData(r *http.Request) (views.OrgPageData, error) {
	ctx := r.Context()
	person, _ := s.person(r)
	m, _ := s.membership(r)
	d := views.OrgPageData{Current: m, PersonID: person.ID, Mail: s.accountMail(),
		Invite: views.OrgInviteForm{Role: orgs.RoleMember, Errors: views.FieldErrors{}}}
	var err error
	if d.Memberships, err = s.orgs.Memberships(ctx, person.ID); err != nil {
		return d, err
	}
	if d.Members, err = s.orgs.Members(ctx, m.ID); err != nil {
		return d, err
	}
	if m.CanManageMembers() {
		if d.Pending, err = s.orgs.Pending(ctx, m.ID); err != nil {
			return d, err
		}
	}
	return d, nil
}

// myOrg shows the organisation the developer works in.
func (s *Server) myOrg(w http.ResponseWriter, r *http.Request) {
	d, err := s.orgPageData(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	d.Notice = orgNotices[r.URL.Query().Get("done")]
	s.render(w, r, http.StatusOK, views.OrgPage(s.page(r, "Organisation", "app-org"), d))
}

// owner is the current membership when it may manage members, else the
// request ends with 403.
func (s *Server) owner(w http.ResponseWriter, r *http.Request) (orgs.Membership, bool) {
	m, ok := s.membership(r)
	if !ok || !m.CanManageMembers() {
		s.error(w, r, fmt.Errorf("manage members as %q: %w", m.Role, orgs.ErrForbidden))
		return orgs.Membership{}, false
	}
	return m, true
}

// inviteToOrg emails an invitation link; only owners invite.
func (s *Server) inviteToOrg(w http.ResponseWriter, r *http.Request) {
	m, ok := s.owner(w, r)
	if !ok {
		return
	}
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	d, err := s.orgPageData(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	d.Invite.Email, d.Invite.Role = strings.TrimSpace(r.PostFormValue("email")), r.PostFormValue("role")
	page := s.page(r, "Organisation", "app-org")
	if !d.Mail {
		d.Invite.Errors["form"] = "invitations are emailed, and this portal sends no email: ask the operator to configure SMTP"
		s.render(w, r, http.StatusServiceUnavailable, views.OrgPage(page, d))
		return
	}
	if msg := users.ValidateEmail(d.Invite.Email); msg != "" {
		d.Invite.Errors["email"] = msg
	}
	if !orgs.ValidRole(d.Invite.Role) {
		d.Invite.Errors["role"] = "must be owner, member or read-only"
	}
	if len(d.Invite.Errors) > 0 {
		s.render(w, r, http.StatusUnprocessableEntity, views.OrgPage(page, d))
		return
	}
	person, _ := s.person(r)
	token, inv, err := s.orgs.Invite(r.Context(), m.ID, person.ID, d.Invite.Email, d.Invite.Role)
	switch {
	case errors.Is(err, orgs.ErrAlreadyMember):
		d.Invite.Errors["email"] = "is a member already"
		s.render(w, r, http.StatusConflict, views.OrgPage(page, d))
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	link := s.link("/invitations/" + token)
	s.inBackground("organisation invitation", func(ctx context.Context) error {
		if err := s.deps.Mailer.Send(ctx, invitationMail(inv, person.Email, link)); err != nil {
			return err
		}
		s.log.Info("invitation emailed", "org_id", inv.OrgID, "invitation_id", inv.ID)
		return nil
	})
	http.Redirect(w, r, "/app/org?done=invited", http.StatusSeeOther)
}

func invitationMail(inv orgs.Invitation, from, link string) mail.Message {
	return mail.Message{To: inv.Email, Subject: "Join " + inv.OrgName + " on Sluice", Body: fmt.Sprintf(
		"%s invites you to the organisation %s on Sluice, as %s: you would share its API keys, plan and usage.\n\n"+
			"Join here (sign in, or sign up, with this email address first):\n\n%s\n\n"+
			"The link works once, until %s. If you do not know why you got this, ignore it.\n",
		from, inv.OrgName, strings.ToLower(views.RoleLabel(inv.Role)), link, inv.ExpiresAt.UTC().Format("2006-01-02 15:04 MST"))}
}

// revokeOrgInvitation ends an invitation before it is accepted.
func (s *Server) revokeOrgInvitation(w http.ResponseWriter, r *http.Request) {
	m, ok := s.owner(w, r)
	if !ok {
		return
	}
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	if err := s.orgs.Revoke(r.Context(), s.actor(r), m.ID, id); err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/app/org?done=revoked", http.StatusSeeOther)
}

// removeOrgMember takes a member out; their access ends at once.
func (s *Server) removeOrgMember(w http.ResponseWriter, r *http.Request) {
	m, ok := s.owner(w, r)
	if !ok {
		return
	}
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	if err := s.orgs.Remove(r.Context(), s.actor(r), m.ID, id); err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/app/org?done=removed", http.StatusSeeOther)
}

// setOrgMemberRole gives a member another role.
func (s *Server) setOrgMemberRole(w http.ResponseWriter, r *http.Request) {
	m, ok := s.owner(w, r)
	if !ok {
		return
	}
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	role := r.PostFormValue("role")
	if !orgs.ValidRole(role) {
		s.error(w, r, fmt.Errorf("role %q: %w", role, errBadRequest))
		return
	}
	if err := s.orgs.SetRole(r.Context(), s.actor(r), m.ID, id, role); err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/app/org?done=role", http.StatusSeeOther)
}

// leaveOrg takes the person out of the organisation they work in, and
// back to their personal one.
func (s *Server) leaveOrg(w http.ResponseWriter, r *http.Request) {
	m, _ := s.membership(r)
	person, _ := s.person(r)
	if err := s.orgs.Remove(r.Context(), s.actor(r), m.ID, person.ID); err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("left organisation", "user_id", person.ID, "org_id", m.ID)
	http.Redirect(w, r, "/app/org", http.StatusSeeOther)
}

// switchOrg makes another of the person's organisations the one they work
// in.
func (s *Server) switchOrg(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	id, err := strconv.ParseInt(r.PostFormValue("org_id"), 10, 64)
	if err != nil || id <= 0 {
		s.error(w, r, fmt.Errorf("org_id: %w", errBadRequest))
		return
	}
	person, _ := s.person(r)
	if _, err := s.orgs.Membership(r.Context(), id, person.ID); err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.setCurrentOrg(w, r, id); err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/app/org?done=switched", http.StatusSeeOther)
}

// invitation shows what an invitation link offers.
func (s *Server) invitation(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	token := r.PathValue("token")
	inv, err := s.orgs.ByToken(r.Context(), token)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v := views.InvitationView{Invitation: inv, Token: token}
	if u, ok := s.currentUser(r); ok {
		v.SignedIn = u.Email
	}
	s.render(w, r, http.StatusOK, views.InvitationPage(s.page(r, "Invitation", ""), v))
}

// acceptInvitation makes the signed-in developer a member, and the
// organisation the one they work in.
func (s *Server) acceptInvitation(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	m, err := s.orgs.Accept(r.Context(), r.PathValue("token"), u)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.setCurrentOrg(w, r, m.ID); err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("joined organisation", "user_id", u.ID, "org_id", m.ID, "role", m.Role)
	http.Redirect(w, r, "/app/org?done=joined", http.StatusSeeOther)
}

// renameOrg gives the organisation another name; only owners rename.
func (s *Server) renameOrg(w http.ResponseWriter, r *http.Request) {
	m, ok := s.owner(w, r)
	if !ok {
		return
	}
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	if msg := orgs.ValidateName(name); msg != "" {
		d, err := s.orgPageData(r)
		if err != nil {
			s.error(w, r, err)
			return
		}
		d.Invite.Errors["name"] = msg
		d.NameInput = name
		s.render(w, r, http.StatusUnprocessableEntity, views.OrgPage(s.page(r, "Organisation", "app-org"), d))
		return
	}
	if err := s.orgs.Rename(r.Context(), s.actor(r), m.ID, name); err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/app/org?done=renamed", http.StatusSeeOther)
}
