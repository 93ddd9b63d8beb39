package web

import "net/http"

// adminRoutes registers the operator dashboard's routes; op wraps a handler
// so only operators reach it. Every state change is a POST (behind
// CrossOriginProtection), and every form works without JavaScript.
func (s *Server) adminRoutes(mux *http.ServeMux, op func(http.HandlerFunc) http.Handler) {
	mux.Handle("GET /admin", op(s.usageOverview))
	mux.Handle("GET /admin/live", op(s.liveKeys))
	mux.Handle("GET /admin/live/stream", op(s.liveStream))
	mux.Handle("GET /admin/history", op(s.adminHistory))
	mux.Handle("GET /admin/history.csv", op(s.adminHistoryCSV))
	mux.Handle("GET /admin/requests", op(s.adminRequests))
	mux.Handle("GET /admin/requests.csv", op(s.adminRequestsCSV))
	mux.Handle("GET /admin/analytics", op(s.adminAnalytics))
	mux.Handle("GET /admin/usage-records.csv", op(s.usageRecordsCSV))

	mux.Handle("GET /admin/services", op(s.withServices(s.servicesList)))
	mux.Handle("POST /admin/services", op(s.withServices(s.serviceCreate)))
	mux.Handle("GET /admin/services/{slug}", op(s.withServices(s.serviceShow)))
	mux.Handle("POST /admin/services/{slug}", op(s.withServices(s.serviceUpdate)))
	mux.Handle("POST /admin/services/{slug}/delete", op(s.withServices(s.serviceDelete)))

	mux.Handle("GET /admin/plans", op(s.plansList))
	mux.Handle("GET /admin/plans/new", op(s.planNew))
	mux.Handle("POST /admin/plans", op(s.planCreate))
	mux.Handle("GET /admin/plans/{id}", op(s.planShow))
	mux.Handle("POST /admin/plans/{id}", op(s.planUpdate))
	mux.Handle("POST /admin/plans/{id}/limits", op(s.tierAdd))
	mux.Handle("POST /admin/plans/{id}/delete", op(s.planDelete))
	mux.Handle("POST /admin/plans/{id}/clone", op(s.planClone))
	// ux2: archive and restore; developers' upgrade requests.
	mux.Handle("POST /admin/plans/{id}/archive", op(s.planArchive))
	mux.Handle("POST /admin/plans/{id}/restore", op(s.planRestore))
	mux.Handle("GET /admin/upgrades", op(s.upgradesList))
	mux.Handle("POST /admin/upgrades/{id}", op(s.upgradeDecide))
	mux.Handle("GET /admin/plans/{id}/limits/{limitID}", op(s.tierShow))
	mux.Handle("GET /admin/plans/{id}/limits/{limitID}/edit", op(s.tierEditForm))
	mux.Handle("POST /admin/plans/{id}/limits/{limitID}", op(s.tierUpdate))
	mux.Handle("POST /admin/plans/{id}/limits/{limitID}/delete", op(s.tierDelete))
	mux.Handle("POST /admin/plans/{id}/limits/{limitID}/promote", op(s.tierPromote))

	mux.Handle("GET /admin/plans/file", op(s.plansFilePage))
	mux.Handle("GET /admin/plans/file/export", op(s.plansFileExport))
	mux.Handle("POST /admin/plans/file/preview", op(s.plansFilePreview))
	mux.Handle("POST /admin/plans/file/apply", op(s.plansFileApply))
	mux.Handle("GET /admin/playground", op(s.playgroundPage))
	mux.Handle("POST /admin/playground/save", op(s.playgroundSave))

	mux.Handle("GET /admin/keys", op(s.keysList))
	mux.Handle("GET /admin/keys/new", op(s.keyIssueForm))
	mux.Handle("POST /admin/keys", op(s.keyIssue))
	mux.Handle("GET /admin/keys/{id}", op(s.keyShow))
	mux.Handle("GET /admin/keys/{id}/secret", op(s.keySecretShow))
	mux.Handle("POST /admin/keys/{id}/rotate", op(s.keyRotate))
	mux.Handle("POST /admin/keys/{id}/expiry", op(s.keySetExpiry))
	mux.Handle("POST /admin/keys/{id}/plan", op(s.keySetPlan))
	mux.Handle("POST /admin/keys/{id}/overrides", op(s.keySetOverride))
	mux.Handle("POST /admin/keys/{id}/overrides/delete", op(s.keyDeleteOverride))
	mux.Handle("GET /admin/keys/{id}/revoke", op(s.keyRevokeConfirm))
	mux.Handle("POST /admin/keys/{id}/revoke", op(s.keyRevoke))

	mux.Handle("GET /admin/developers", op(s.developersList))
	mux.Handle("GET /admin/developers/{id}", op(s.developerShow))
	mux.Handle("POST /admin/developers/{id}/plan", op(s.developerSetPlan))
	mux.Handle("POST /admin/developers/{id}/quota-grants", op(s.developerQuotaGrant))
	mux.Handle("POST /admin/developers/{id}/quota-resets", op(s.developerQuotaReset))
	mux.Handle("POST /admin/developers/{id}/billing-anchor", op(s.developerBillingAnchor))
	mux.Handle("POST /admin/developers/{id}/disable", op(s.developerDisable))
	mux.Handle("POST /admin/developers/{id}/enable", op(s.developerEnable))
	mux.Handle("GET /admin/orgs", op(s.adminOrgs))
	mux.Handle("GET /admin/orgs/{id}", op(s.adminOrg))
	mux.Handle("POST /admin/orgs/{id}/plan", op(s.adminOrgSetPlan))

	mux.Handle("GET /admin/tokens", op(s.tokensList))
	mux.Handle("POST /admin/tokens", op(s.tokenCreate))
	mux.Handle("POST /admin/tokens/{id}/revoke", op(s.tokenRevoke))

	mux.Handle("GET /admin/operators", op(s.operatorsList))
	mux.Handle("POST /admin/operators", op(s.operatorInvite))
	mux.Handle("POST /admin/operators/reset-link", op(s.resetLinkCreate))
	// ux2: removing and demoting operators.
	mux.Handle("POST /admin/operators/{id}/demote", op(s.operatorDemote))
	mux.Handle("POST /admin/operators/{id}/remove", op(s.operatorRemove))

	mux.Handle("GET /admin/audit", op(s.auditList))
}
