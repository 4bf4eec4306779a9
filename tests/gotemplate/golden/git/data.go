// Package git holds gitops-reverser's commit message data shapes under the package name they
// have there, so fmt writes their type names (git.ResourceRef) as GR's messages show them.
package git

import "strings"

type CommitMessageData struct {
	Operation  string
	Group      string
	Version    string
	Resource   string
	Namespace  string
	Name       string
	APIVersion string
	Username   string
	GitTarget  string
}

type ReconcileCommitMessageData struct {
	Count      int
	GitTarget  string
	Group      string
	Version    string
	Resource   string
	APIVersion string
	Revision   string
}

type ResourceRef struct {
	Group     string
	Version   string
	Resource  string
	Namespace string
	Name      string
}

func (r ResourceRef) String() string {
	var parts []string
	for _, p := range []string{r.Group, r.Version, r.Resource, r.Namespace, r.Name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

type GroupedCommitMessageData struct {
	Author     string
	GitTarget  string
	Count      int
	Operations map[string]int
	Resources  []ResourceRef
}
