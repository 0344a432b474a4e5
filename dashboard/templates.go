package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// pageNames are the templates/<name>.html pages, each rendered inside
// templates/layout.html.
var pageNames = []string{"overview", "events", "event", "audit", "login", "error"}

var funcs = template.FuncMap{
	// when is a time for people, in UTC; the zero time is "never".
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"whenp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		if t.After(now) {
			return "in " + humanDuration(t.Sub(now))
		}
		return humanDuration(age(now, t)) + " ago"
	},
	"duration": humanDuration,
	"seconds":  func(d time.Duration) string { return fmt.Sprintf("%.0f", d.Seconds()) },
	"percent": func(f float64) string {
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", 100*f), "0"), ".") + "%"
	},
	"ratio": func(f float64) string { return fmt.Sprintf("%.4f", f) },
	"str": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"ms":    func(f float64) string { return fmt.Sprintf("%.0f ms", f) },
	"join":  strings.Join,
	"color": seriesColor,
	// replayArgs is the argument of the "replay" template.
	"replayArgs": func(csrf string, jobID int64, ret, status string, replays int) replayButton {
		return replayButton{CSRF: csrf, JobID: jobID, Return: ret, ExpectStatus: status, ExpectReplays: replays}
	},
}

// replayButton is what the "replay" template needs.
type replayButton struct {
	CSRF   string
	JobID  int64
	Return string
	// ExpectStatus is the job's status as the page shows it: the replay
	// is refused once the job has moved (a stale page's button for a dead
	// letter never re-runs a job replayed and completed meanwhile; review
	// helper-194).
	ExpectStatus string
	// ExpectReplays is how many times the job had been replayed when the
	// page was rendered (admin.Job.Replays, admin.DeadLetter.Replays): the
	// status alone is the same after someone else's replay ran the job to
	// the same end (completed, replayed, completed again), and the stale
	// button re-ran its handler (review helper-321).
	ExpectReplays int
}

func parsePages() (map[string]*template.Template, error) {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// compareFold orders strings case-insensitively (header names).
func compareFold(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) }
