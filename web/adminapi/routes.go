package adminapi

import "net/http"

// route is one endpoint of the admin API. The mux and the OpenAPI test are
// both built from routes(), so the two cannot drift apart.
type route struct {
	method string
	// path is the full ServeMux path, wildcards included, so r.Pattern names
	// the endpoint in logs and metrics.
	path string
	// operationID is the endpoint's operationId in openapi.json.
	operationID string
	handler     http.HandlerFunc
	// public routes need no operator token.
	public bool
}

// routes is the admin API's route table.
func (a *api) routes() []route {
	const p = Prefix
	return []route{
		{"GET", p + "/openapi.json", "getOpenAPI", a.openAPI, true},

		{"GET", p + "/plans", "listPlans", a.listPlans, false},
		{"POST", p + "/plans", "createPlan", a.createPlan, false},
		{"GET", p + "/plans/{id}", "getPlan", a.getPlan, false},
		{"PUT", p + "/plans/{id}", "updatePlan", a.updatePlan, false},
		{"DELETE", p + "/plans/{id}", "deletePlan", a.deletePlan, false},
		{"POST", p + "/plans/{id}/limits", "addLimit", a.addLimit, false},
		{"PUT", p + "/plans/{id}/limits/{limit_id}", "updateLimit", a.updateLimit, false},
		{"DELETE", p + "/plans/{id}/limits/{limit_id}", "deleteLimit", a.deleteLimit, false},
		{"POST", p + "/plans/{id}/limits/{limit_id}/promote", "promoteLimit", a.promoteLimit, false},
		{"GET", p + "/plans-file", "exportPlansFile", a.exportPlansFile, false},
		{"POST", p + "/plans-file/diff", "diffPlansFile", a.diffPlansFile, false},
		{"POST", p + "/plans-file/apply", "applyPlansFile", a.applyPlansFileHandler, false},
		{"GET", p + "/playground/presets", "listPlaygroundPresets", a.listPresets, false},
		{"GET", p + "/playground/routes", "listRecordedRoutes", a.listRecordedRoutes, false},
		{"POST", p + "/playground", "replayPlayground", a.replay, false},

		{"GET", p + "/services", "listServices", a.listServices, false},
		{"POST", p + "/services", "createService", a.createService, false},
		{"GET", p + "/services/{slug}", "getService", a.getService, false},
		{"PUT", p + "/services/{slug}", "updateService", a.updateService, false},
		{"DELETE", p + "/services/{slug}", "deleteService", a.deleteService, false},
		{"POST", p + "/services/{slug}/tokens", "createServiceToken", a.createServiceToken, false},
		{"POST", p + "/services/{slug}/tokens/{id}/revoke", "revokeServiceToken", a.revokeServiceToken, false},

		{"GET", p + "/keys", "listKeys", a.listKeys, false},
		{"POST", p + "/keys", "createKey", a.createKey, false},
		{"GET", p + "/keys/{id}", "getKey", a.getKey, false},
		{"POST", p + "/keys/{id}/rotate", "rotateKey", a.rotateKey, false},
		{"POST", p + "/keys/{id}/revoke", "revokeKey", a.revokeKey, false},
		{"PUT", p + "/keys/{id}/overrides", "setKeyOverrides", a.setKeyOverrides, false},
		{"PUT", p + "/keys/{id}/scope", "setKeyScope", a.setKeyScope, false},
		{"PUT", p + "/keys/{id}/plan", "setKeyPlan", a.setKeyPlan, false},
		{"GET", p + "/keys/{id}/usage", "getKeyUsage", a.keyUsage, false},

		{"GET", p + "/developers", "listDevelopers", a.listDevelopers, false},
		{"PUT", p + "/developers/{id}/plan", "setDeveloperPlan", a.setDeveloperPlan, false},
		{"PUT", p + "/developers/{id}/billing-anchor", "setBillingAnchor", a.setBillingAnchor, false},
		{"POST", p + "/developers/{id}/quota-grants", "grantQuota", a.grantQuota, false},
		{"POST", p + "/developers/{id}/quota-resets", "resetQuota", a.resetQuota, false},

		{"GET", p + "/organisations", "listOrganisations", a.listOrganisations, false},
		{"GET", p + "/organisations/{id}", "getOrganisation", a.getOrganisation, false},

		{"GET", p + "/audit", "listAudit", a.listAudit, false},

		{"GET", p + "/usage-records", "listUsageRecords", a.listUsageRecords, false},
		{"GET", p + "/usage-records.csv", "exportUsageRecords", a.exportUsageRecords, false},

		{"GET", p + "/tokens", "listTokens", a.listTokens, false},
		{"POST", p + "/tokens", "createToken", a.createToken, false},
		{"POST", p + "/tokens/{id}/revoke", "revokeToken", a.revokeToken, false},
	}
}
