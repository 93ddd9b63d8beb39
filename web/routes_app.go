package web

import "net/http"

// appRoutes registers the developer portal's routes: the generated docs
// (public), sign-up, and the signed-in developer's usage and keys.
func (s *Server) appRoutes(mux *http.ServeMux) {
	d := newDocsPages(s)
	mux.HandleFunc("GET /docs", d.page)
	mux.HandleFunc("GET /docs/limits.md", d.markdown)
	mux.HandleFunc("GET /docs/openapi.json", d.openAPI)
	mux.HandleFunc("GET /docs/plans.schema.json", s.plansSchema)
	// Each declared service's docs, generated the same way.
	mux.HandleFunc("GET /docs/services/{slug}", d.page)
	mux.HandleFunc("GET /docs/services/{slug}/limits.md", d.markdown)
	mux.HandleFunc("GET /docs/services/{slug}/openapi.json", d.openAPI)

	mux.HandleFunc("GET /signup", s.signUpForm)
	mux.HandleFunc("POST /signup", s.signUp)

	// Every page of the portal works in the developer's current
	// organisation (org_context.go); a read-only member changes nothing.
	dev := func(h http.HandlerFunc) http.Handler { return s.requireRole("developer", s.inOrg(h, false)) }
	anyMember := func(h http.HandlerFunc) http.Handler { return s.requireRole("developer", s.inOrg(h, true)) }
	mux.Handle("GET /app", dev(s.myUsage))
	mux.Handle("GET /app/stream", dev(s.myUsageStream))
	mux.Handle("GET /app/history", dev(s.myHistory))
	mux.Handle("GET /app/history.csv", dev(s.myHistoryCSV))
	mux.Handle("GET /app/requests", dev(s.myRequests))
	mux.Handle("GET /app/requests.csv", dev(s.myRequestsCSV))
	mux.Handle("GET /app/analytics", dev(s.myAnalytics))
	mux.Handle("GET /app/keys", dev(s.myKeys))
	mux.Handle("POST /app/keys", dev(s.createMyKey))
	mux.Handle("GET /app/keys/{id}/secret", dev(s.showMyKeySecret))
	mux.Handle("POST /app/keys/{id}/rotate", dev(s.rotateMyKey))
	mux.Handle("GET /app/keys/{id}/revoke", dev(s.confirmRevokeMyKey))
	mux.Handle("POST /app/keys/{id}/revoke", dev(s.revokeMyKey))

	// Threshold alerts: rules, webhooks, the delivery log (app_alerts.go).
	mux.Handle("GET /app/alerts", dev(s.myAlerts))
	mux.Handle("POST /app/alerts/rules", dev(s.saveMyAlertRule))
	mux.Handle("POST /app/alerts/rules/{id}/delete", dev(s.deleteMyAlertRule))
	mux.Handle("POST /app/alerts/webhooks", dev(s.createMyWebhook))
	mux.Handle("GET /app/alerts/webhooks/{id}/secret", dev(s.showMyWebhookSecret))
	mux.Handle("POST /app/alerts/webhooks/{id}/test", dev(s.testMyWebhook))
	mux.Handle("POST /app/alerts/webhooks/{id}/delete", dev(s.deleteMyWebhook))
	// ux2: the developer's plan and upgrade requests.
	mux.Handle("GET /app/plan", dev(s.myPlan))
	mux.Handle("POST /app/plan", dev(s.requestUpgrade))

	// Organisations: members, invitations, switching (app_org.go).
	mux.Handle("GET /app/org", dev(s.myOrg))
	mux.Handle("POST /app/org/name", dev(s.renameOrg))
	mux.Handle("POST /app/org/switch", anyMember(s.switchOrg))
	mux.Handle("POST /app/org/leave", anyMember(s.leaveOrg))
	mux.Handle("POST /app/org/invitations", dev(s.inviteToOrg))
	mux.Handle("POST /app/org/invitations/{id}/revoke", dev(s.revokeOrgInvitation))
	mux.Handle("POST /app/org/members/{id}/remove", dev(s.removeOrgMember))
	mux.Handle("POST /app/org/members/{id}/role", dev(s.setOrgMemberRole))
	mux.HandleFunc("GET /invitations/{token}", s.invitation)
	mux.Handle("POST /invitations/{token}/accept", s.requireRole("developer", http.HandlerFunc(s.acceptInvitation)))
}
