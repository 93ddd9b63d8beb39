package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/views"
)

// maxDeliveriesShown is how much of the delivery log the page lists.
const maxDeliveriesShown = 50

// alertsPath is the developer's alerts page.
const alertsPath = "/app/alerts"

// myAlerts shows the developer's alert rules, webhooks and delivery log.
func (s *Server) myAlerts(w http.ResponseWriter, r *http.Request) {
	v, err := s.myAlertsPage(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if id, err := strconv.ParseInt(r.URL.Query().Get("sent"), 10, 64); err == nil && id > 0 {
		v.Sent = id
	}
	s.render(w, r, http.StatusOK, views.MyAlerts(s.page(r, "Alerts", "app-alerts"), v))
}

func (s *Server) myAlertsPage(r *http.Request) (views.AlertsPage, error) {
	if s.deps.Alerts == nil {
		return views.AlertsPage{}, errUnavailable
	}
	ctx := r.Context()
	u, _ := s.currentUser(r)
	v := views.AlertsPage{EmailOn: s.deps.AlertEmail, Email: u.Email, Rule: views.DefaultAlertRuleForm(), Errors: views.FieldErrors{}}
	keys, _, err := s.deps.Keys.List(ctx, apikeys.Filter{UserID: u.ID, State: apikeys.StateActive, Limit: maxOwnKeys})
	if err != nil {
		return v, err
	}
	v.Keys = keys
	rules, err := s.deps.Alerts.Rules(ctx, u.ID)
	if err != nil {
		return v, err
	}
	for _, rule := range rules {
		if rule.KeyID == nil {
			// The form starts from the account's rule, to edit it.
			v.Rule = views.AlertRuleForm{Scope: "account", Thresholds: alerts.FormatThresholds(rule.Thresholds), Pace: rule.Pace, Email: rule.Email}
		}
		row := views.AlertRuleRow{Rule: rule, Scope: "Whole account"}
		if rule.KeyID != nil {
			row.Scope = "Key " + strconv.FormatInt(*rule.KeyID, 10) + " (revoked)"
			for _, k := range keys {
				if k.ID == *rule.KeyID {
					row.Scope = "Key " + k.Name
				}
			}
		}
		v.Rules = append(v.Rules, row)
	}
	if v.Webhooks, err = s.deps.Alerts.Webhooks(ctx, u.ID); err != nil {
		return v, err
	}
	if v.Deliveries, err = s.deps.Alerts.Deliveries(ctx, u.ID, maxDeliveriesShown); err != nil {
		return v, err
	}
	return v, nil
}

// rerenderAlerts shows the page again with a form's errors.
func (s *Server) rerenderAlerts(w http.ResponseWriter, r *http.Request, status int, change func(*views.AlertsPage)) {
	v, err := s.myAlertsPage(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	change(&v)
	s.render(w, r, status, views.MyAlerts(s.page(r, "Alerts", "app-alerts"), v))
}

// saveMyAlertRule creates or replaces the rule for the account or one key.
func (s *Server) saveMyAlertRule(w http.ResponseWriter, r *http.Request) {
	if s.deps.Alerts == nil {
		s.error(w, r, errUnavailable)
		return
	}
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	f := views.AlertRuleForm{
		Scope:      strings.TrimSpace(r.PostFormValue("scope")),
		Thresholds: strings.TrimSpace(r.PostFormValue("thresholds")),
		Pace:       r.PostFormValue("pace") != "",
		Email:      r.PostFormValue("email") != "",
	}
	var keyID *int64
	var err error
	if f.Scope != "account" {
		id, perr := strconv.ParseInt(f.Scope, 10, 64)
		if perr != nil || id <= 0 {
			err = &alerts.FieldError{Field: "key", Message: "choose the whole account or one of your keys"}
		}
		keyID = &id
	}
	var thresholds []int32
	if err == nil {
		thresholds, err = alerts.ParseThresholds(f.Thresholds)
	}
	if err == nil {
		_, err = s.deps.Alerts.SaveRule(r.Context(), u.ID, keyID, thresholds, f.Pace, f.Email)
	}
	var fe *alerts.FieldError
	switch {
	case errors.As(err, &fe):
		s.rerenderAlerts(w, r, http.StatusUnprocessableEntity, func(v *views.AlertsPage) {
			v.Rule, v.Errors = f, views.FieldErrors{fe.Field: fe.Message}
		})
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	s.log.Info("alert rule saved", "user_id", u.ID)
	http.Redirect(w, r, alertsPath, http.StatusSeeOther)
}

// deleteMyAlertRule removes one of the developer's rules.
func (s *Server) deleteMyAlertRule(w http.ResponseWriter, r *http.Request) {
	if s.deps.Alerts == nil {
		s.error(w, r, errUnavailable)
		return
	}
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	if err := s.deps.Alerts.DeleteRule(r.Context(), u.ID, id); err != nil {
		s.error(w, r, alertsError(err))
		return
	}
	http.Redirect(w, r, alertsPath, http.StatusSeeOther)
}

// createMyWebhook registers a webhook, gives the account the default rule
// if it has none, and sends the browser to the page that shows the signing
// secret once (post, redirect, get, as for keys: see secret_once.go).
func (s *Server) createMyWebhook(w http.ResponseWriter, r *http.Request) {
	if s.deps.Alerts == nil {
		s.error(w, r, errUnavailable)
		return
	}
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	raw := strings.TrimSpace(r.PostFormValue("url"))
	hook, secret, err := s.deps.Alerts.CreateWebhook(r.Context(), u.ID, raw)
	var fe *alerts.FieldError
	switch {
	case errors.As(err, &fe):
		s.rerenderAlerts(w, r, http.StatusUnprocessableEntity, func(v *views.AlertsPage) {
			v.Webhook, v.Errors = raw, views.FieldErrors{fe.Field: fe.Message}
		})
		return
	case errors.Is(err, alerts.ErrTooManyWebhooks):
		s.rerenderAlerts(w, r, http.StatusConflict, func(v *views.AlertsPage) {
			v.Webhook = raw
			v.Errors = views.FieldErrors{"webhooks": "You already have " + strconv.Itoa(alerts.MaxWebhooks) + " webhooks, the most allowed. Delete one first."}
		})
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	if err := s.deps.Alerts.EnsureDefaultRule(r.Context(), u.ID); err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("webhook registered", "user_id", u.ID, "webhook_id", hook.ID)
	s.handOver(w, r, u.ID, webhookSecretPath(hook.ID), onceSecret{KeyID: hook.ID, Secret: secret})
}

func webhookSecretPath(id int64) string {
	return alertsPath + "/webhooks/" + strconv.FormatInt(id, 10) + "/secret"
}

// showMyWebhookSecret shows a new webhook's secret the one time its cookie
// arrives.
func (s *Server) showMyWebhookSecret(w http.ResponseWriter, r *http.Request) {
	hook, err := s.ownWebhook(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	o, err := s.takeOver(w, r, u.ID, hook.ID)
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		s.render(w, r, http.StatusOK, views.WebhookSecretGone(s.page(r, "Secret already shown", "app-alerts"), hook))
		return
	}
	s.render(w, r, http.StatusOK, views.WebhookSecret(s.page(r, "Webhook secret", "app-alerts"), views.WebhookSecretShown{Webhook: hook, Secret: o.Secret}))
}

// testMyWebhook queues a test event to the webhook and attempts it at once,
// so the delivery log on the next page shows the receiver's answer; a
// failed attempt is retried like any other delivery.
func (s *Server) testMyWebhook(w http.ResponseWriter, r *http.Request) {
	hook, err := s.ownWebhook(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	id, err := s.deps.Alerts.EnqueueTest(r.Context(), u.ID, hook.ID, s.now())
	if err != nil {
		s.error(w, r, alertsError(err))
		return
	}
	if s.deps.AlertSender != nil {
		if _, err := s.deps.AlertSender.SendNow(r.Context(), id); err != nil {
			// Queued all the same: the worker retries it.
			s.log.Warn("test event", "delivery_id", id, "err", err)
		}
	}
	http.Redirect(w, r, alertsPath+"?sent="+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

// deleteMyWebhook removes one of the developer's webhooks.
func (s *Server) deleteMyWebhook(w http.ResponseWriter, r *http.Request) {
	hook, err := s.ownWebhook(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	if err := s.deps.Alerts.DeleteWebhook(r.Context(), u.ID, hook.ID); err != nil {
		s.error(w, r, alertsError(err))
		return
	}
	s.log.Info("webhook deleted", "user_id", u.ID, "webhook_id", hook.ID)
	http.Redirect(w, r, alertsPath, http.StatusSeeOther)
}

// ownWebhook loads webhook {id} if it is the signed-in developer's; another
// developer's is as absent as a missing one.
func (s *Server) ownWebhook(r *http.Request) (alerts.Webhook, error) {
	if s.deps.Alerts == nil {
		return alerts.Webhook{}, errUnavailable
	}
	id, err := pathID(r, "id")
	if err != nil {
		return alerts.Webhook{}, err
	}
	u, _ := s.currentUser(r)
	h, err := s.deps.Alerts.Webhook(r.Context(), u.ID, id)
	return h, alertsError(err)
}

// alertsError maps the package's not-found to the UI's.
func alertsError(err error) error {
	if errors.Is(err, alerts.ErrNotFound) {
		return errNotFound
	}
	return err
}
