// Package static holds the dashboard's vendored and hand-written assets,
// embedded into the binary so a deployment is one file. Every asset name
// carries its version, so web serves them as immutable.
package static

import "embed"

// FS holds every asset under its file name, e.g. "htmx-2.0.11.min.js".
//
//go:embed *.css *.js *.svg
var FS embed.FS

// The asset names the layout links. Change them together with the files.
const (
	CSS  = "sluice-3.css"
	JS   = "sluice-1.js" // the dashboard's own behaviour (no inline script)
	HTMX = "htmx-2.0.11.min.js"
	SSE  = "htmx-ext-sse-2.2.4.min.js"
	Icon = "favicon-1.svg"
)
