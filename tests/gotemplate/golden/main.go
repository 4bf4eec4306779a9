// Renders commit message templates with Go's text/template exactly as gitops-reverser (v0.41
// line) does: its three data structs, its defaults, strings.TrimSpace on the configured text and
// missingkey=error. Reads one JSON request per line on stdin, writes one JSON answer per line, so
// a property test can ask many questions of one process. Standard library only.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"text/template"

	"golden/git"
)

var defaults = map[string]string{
	"event": "[{{.Operation}}] {{.APIVersion}}/{{.Resource}}/{{.Name}}",
	"group": "{{.Author}} on {{.GitTarget}}: {{.Count}} resource(s)",
	"reconcile": "reconciled {{.Count}} " +
		"{{if .Resource}}{{.Resource}}{{else}}resources{{end}}" +
		"{{if .Revision}} (last resourceVersion: {{.Revision}}){{end}}",
}

type object struct {
	Operation, Group, Version, Resource, Namespace, Name string
}

type request struct {
	Kind     string   `json:"kind"`
	Template string   `json:"template"`
	Username string   `json:"username"`
	Target   string   `json:"target"`
	Objects  []object `json:"objects"`
	Count    int      `json:"count"`
	Group    string   `json:"group"`
	Version  string   `json:"version"`
	Resource string   `json:"resource"`
	Revision string   `json:"revision"`
}

type answer struct {
	OK     bool   `json:"ok"`
	Output string `json:"output"`
	Error  string `json:"error"`
}

func apiVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}

func data(r request) any {
	switch r.Kind {
	case "event":
		o := r.Objects[0]
		return git.CommitMessageData{o.Operation, o.Group, o.Version, o.Resource, o.Namespace, o.Name,
			apiVersion(o.Group, o.Version), r.Username, r.Target}
	case "group":
		ops := map[string]int{}
		refs := []git.ResourceRef{}
		for _, o := range r.Objects {
			ops[o.Operation]++
			refs = append(refs, git.ResourceRef{o.Group, o.Version, o.Resource, o.Namespace, o.Name})
		}
		return git.GroupedCommitMessageData{r.Username, r.Target, len(r.Objects), ops, refs}
	default:
		return git.ReconcileCommitMessageData{r.Count, r.Target, r.Group, r.Version, r.Resource,
			apiVersion(r.Group, r.Version), r.Revision}
	}
}

func render(r request) answer {
	text := strings.TrimSpace(r.Template)
	if text == "" {
		text = defaults[r.Kind]
	}
	tmpl, err := template.New(r.Kind).Option("missingkey=error").Parse(text)
	if err != nil {
		return answer{Error: err.Error()}
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data(r)); err != nil {
		return answer{Error: err.Error()}
	}
	return answer{OK: true, Output: buf.String()}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			_ = out.Encode(answer{Error: "bad request: " + err.Error()})
			continue
		}
		_ = out.Encode(render(r))
	}
}
