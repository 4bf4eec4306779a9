"""The audit webhook ingress: kube-apiserver audit EventLists in, author-fact batches on the log out."""
