"""Kubernetes as every stage sees it, below the stages and attribution.

`pipeline.kube.selector` is the label-selector grammar (`labels.Parse` semantics) that the fact
index, the watch rules, the commit worker and the custom resources all read. The room is for what
more than one stage needs from Kubernetes itself; what only one stage needs stays with it.
"""
