"""Kubernetes as every stage sees it, below the stages and attribution.

`pipeline.kube.selector` is the label-selector grammar (`labels.Parse` semantics) that the fact
index, the watch rules, the commit worker and the custom resources all read;
`pipeline.kube.client` is the API-server client (with `throttle`, its request rate) and
`pipeline.kube.lease` the Lease that elects one watcher per cluster. Nothing here counts on a
stage's metrics: a caller that wants a count passes a callback (`on_undecodable`).

The room is for what more than one stage needs from Kubernetes itself; what only one stage needs
stays with it.
"""
