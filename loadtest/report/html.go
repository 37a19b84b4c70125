package report

import (
	"fmt"
	"html/template"
	"os"

	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/slo"
)

type image struct {
	Title string
	Src   template.URL
}

type panel struct {
	Name    string
	Summary string
	Steps   []load.StepResult
	SLO     []slo.Verdict
	Images  []image
}

type htmlPage struct {
	Title  string
	Rows   [][]string // comparison table (compare only)
	Head   []string
	Panels []panel
	Wide   []image // overlay charts (compare only)
}

// The page uses no external resource: styles inline, plots as data URIs.
var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) },
	"d":   round,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
pre{background:#f6f8fa;padding:1em;overflow-x:auto;font-size:12px}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#eee}.pass{color:#080;font-weight:bold}.fail{color:#b00;font-weight:bold}
.cols{display:flex;gap:1.5em;flex-wrap:wrap}.cols>div{flex:1;min-width:480px}
img{max-width:100%;border:1px solid #ddd;margin:.3em 0}
</style></head><body>
<h1>{{.Title}}</h1>
{{if .Rows}}<table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>{{end}}
{{range .Wide}}<h3>{{.Title}}</h3><img alt="{{.Title}}" src="{{.Src}}">{{end}}
<div class="cols">{{range .Panels}}<div>
{{if .Name}}<h2>{{.Name}}</h2>{{end}}
{{if .SLO}}<h3>SLO</h3><table><tr><th>objective</th><th>actual</th><th>verdict</th></tr>
{{range .SLO}}<tr><td>{{.Text}}</td><td>{{.}}</td><td class="{{if .Pass}}pass{{else}}fail{{end}}">{{if .Pass}}PASS{{else}}FAIL{{end}}</td></tr>{{end}}</table>{{end}}
<h3>Summary</h3><pre>{{.Summary}}</pre>
{{if .Steps}}<h3>Steps</h3><table><tr><th>step</th><th>intended/s</th><th>achieved/s</th><th>requests</th><th>success</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{{range .Steps}}<tr><td>{{.Step}}</td><td>{{printf "%.0f" .IntendedRate}}</td><td>{{printf "%.1f" .Rate}}</td><td>{{.Requests}}</td><td>{{pct .Success}}</td><td>{{d .Latency.P50}}</td><td>{{d .Latency.P90}}</td><td>{{d .Latency.P99}}</td><td>{{d .Latency.P999}}</td><td>{{d .Latency.Max}}</td></tr>{{end}}</table>{{end}}
{{range .Images}}<h3>{{.Title}}</h3><img alt="{{.Title}}" src="{{.Src}}">{{end}}
</div>{{end}}</div>
</body></html>
`))

func writeHTML(name string, p htmlPage) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	if err := pageTmpl.Execute(f, p); err != nil {
		return fmt.Errorf("report: render %s: %w", name, err)
	}
	return f.Close()
}
