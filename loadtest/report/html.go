package report

import (
	"fmt"
	"html/template"
	"os"
	"time"

	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/slo"
)

type image struct {
	Title string
	Src   template.URL
}

// tile is one headline figure at the top of a run's page.
type tile struct {
	Label, Value, Class string
}

type panel struct {
	Name    string
	Summary string
	Steps   []load.StepResult
	SLO     []slo.Verdict
	SLOPass *bool
}

type htmlPage struct {
	Title  string
	Meta   []string   // facts under the title
	Tiles  []tile     // headline figures (one run)
	Head   []string   // headline table: metric, then a column per run
	Rows   [][]string //
	Plots  []image
	Panels []panel // per run: SLO, steps, text summary
}

// meta describes a run in a line under the title.
func meta(s *Saved) []string {
	m := []string{"schedule " + s.Load.Schedule, "mode " + s.Load.Mode, fmt.Sprintf("%d connections", s.Load.Connections)}
	if s.Label != "" {
		m = append([]string{s.Label}, m...)
	}
	if !s.Finished.IsZero() {
		m = append(m, "finished "+s.Finished.UTC().Format(time.DateTime)+" UTC")
	}
	return m
}

// tiles are the headline figures of a run.
func tiles(s *Saved) []tile {
	t := []tile{
		{Label: "sent (req/s)", Value: fmt.Sprintf("%.0f", s.Load.Rate)},
		{Label: "delivered (events/s)", Value: fmt.Sprintf("%.0f", s.Receive.Rate)},
		{Label: "success", Value: fmt.Sprintf("%.2f%%", 100*s.Load.Success)},
		{Label: "publish p99", Value: round(s.Load.Latency.P99).String()},
		{Label: "e2e p99", Value: round(s.Receive.Latency.P99).String()},
		{Label: "lost events", Value: fmt.Sprint(s.Lost)},
	}
	if s.Lost > 0 {
		t[len(t)-1].Class = "fail"
	}
	if s.SLOPass != nil {
		v := tile{Label: "SLO", Value: "PASS", Class: "pass"}
		if !*s.SLOPass {
			v.Value, v.Class = "FAIL", "fail"
		}
		t = append(t, v)
	}
	return t
}

// The page uses no external resource: styles inline, plots as data URIs. Plots and
// panels sit in two columns down to 900 px wide, one below.
var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) },
	"d":   round,
	"actual": func(v slo.Verdict) string {
		if v.Missing {
			return "not measured"
		}
		return slo.Format(v.Key, v.Actual)
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f3f5f8;color:#1d2630}
main{max-width:1600px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:16px;margin:0 0 10px}
h3{font-size:14px;margin:14px 0 6px;color:#3b4754}
.meta{color:#5a6572;margin:0 0 16px;font-size:13px}
.meta span+span::before{content:" · "}
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 16px}
.tile{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:8px 16px;min-width:140px}
.tile b{display:block;font-size:20px;font-weight:600}
.tile span{color:#5a6572;font-size:12px}
.grid{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:16px;margin:0 0 16px}
.grid.one{grid-template-columns:minmax(0,1fr)}
@media (max-width:900px){.grid{grid-template-columns:minmax(0,1fr)}}
.card{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:12px 14px;margin:0;min-width:0}
.wide{margin:0 0 16px}
figure.card{padding:8px}
figure.card img{display:block;width:100%;height:auto}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:13px}
td,th{border-bottom:1px solid #e6eaef;padding:4px 10px;text-align:right;white-space:nowrap}
th{background:#f6f8fa;font-weight:600}
td:first-child,th:first-child{text-align:left}
pre{background:#f6f8fa;border-radius:6px;padding:10px;overflow-x:auto;font-size:12px;margin:0}
.pass{color:#18794e;font-weight:600}.fail{color:#c62828;font-weight:600}
</style></head><body><main>
<h1>{{.Title}}</h1>
{{if .Meta}}<p class="meta">{{range .Meta}}<span>{{.}}</span>{{end}}</p>{{end}}
{{if .Tiles}}<div class="tiles">{{range .Tiles}}<div class="tile"><b class="{{.Class}}">{{.Value}}</b><span>{{.Label}}</span></div>{{end}}</div>{{end}}
{{if .Rows}}<div class="card wide scroll"><table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table></div>{{end}}
<div class="grid plots">{{range .Plots}}<figure class="card"><img alt="{{.Title}}" src="{{.Src}}"></figure>{{end}}</div>
<div class="grid panels{{if eq (len .Panels) 1}} one{{end}}">{{range .Panels}}<div class="card scroll">
{{if .Name}}<h2>{{.Name}}</h2>{{end}}
{{if .SLO}}<h3>SLO{{with .SLOPass}}: {{if .}}<span class="pass">PASS</span>{{else}}<span class="fail">FAIL</span>{{end}}{{end}}</h3><table><tr><th>objective</th><th>actual</th><th>verdict</th></tr>
{{range .SLO}}<tr><td>{{.Text}}</td><td>{{actual .}}</td><td class="{{if .Pass}}pass{{else}}fail{{end}}">{{if .Pass}}PASS{{else}}FAIL{{end}}</td></tr>{{end}}</table>{{end}}
{{if .Steps}}<h3>Steps</h3><table><tr><th>step</th><th>intended/s</th><th>achieved/s</th><th>requests</th><th>success</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{{range .Steps}}<tr><td>{{.Step}}</td><td>{{printf "%.0f" .IntendedRate}}</td><td>{{printf "%.1f" .Rate}}</td><td>{{.Requests}}</td><td>{{pct .Success}}</td><td>{{d .Latency.P50}}</td><td>{{d .Latency.P90}}</td><td>{{d .Latency.P99}}</td><td>{{d .Latency.P999}}</td><td>{{d .Latency.Max}}</td></tr>{{end}}</table>{{end}}
<h3>Summary</h3><pre>{{.Summary}}</pre>
</div>{{end}}</div>
</main></body></html>
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
