package web

// LocalPath exposes the sign-in redirect filter to the fuzz test.
var LocalPath = localPath

// PlanInput and TierInput expose the form decoders to the fuzz tests.
var (
	PlanInput = planInput
	TierInput = tierInput
	ParseForm = parseForm
)
