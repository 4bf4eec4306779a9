"""Group/resource of a watched object from its apiVersion and kind, without a discovery call.

`reverser resolve` works offline, so it cannot ask an apiserver for the REST mapping; built-in
kinds use a table (irregular plurals such as `endpoints` need it), anything else the apiserver's
own fallback guess: lower-case plural.
"""

from __future__ import annotations

from pipeline.models import GroupResource

__all__ = ["group_resource_for", "guess_resource"]

_KNOWN: dict[tuple[str, str], str] = {
    ("", "Binding"): "bindings",
    ("", "ComponentStatus"): "componentstatuses",
    ("", "ConfigMap"): "configmaps",
    ("", "Endpoints"): "endpoints",
    ("", "Event"): "events",
    ("", "LimitRange"): "limitranges",
    ("", "Namespace"): "namespaces",
    ("", "Node"): "nodes",
    ("", "PersistentVolume"): "persistentvolumes",
    ("", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("", "Pod"): "pods",
    ("", "PodTemplate"): "podtemplates",
    ("", "ReplicationController"): "replicationcontrollers",
    ("", "ResourceQuota"): "resourcequotas",
    ("", "Secret"): "secrets",
    ("", "Service"): "services",
    ("", "ServiceAccount"): "serviceaccounts",
    ("apps", "ControllerRevision"): "controllerrevisions",
    ("apps", "DaemonSet"): "daemonsets",
    ("apps", "Deployment"): "deployments",
    ("apps", "ReplicaSet"): "replicasets",
    ("apps", "StatefulSet"): "statefulsets",
    ("batch", "CronJob"): "cronjobs",
    ("batch", "Job"): "jobs",
    ("autoscaling", "HorizontalPodAutoscaler"): "horizontalpodautoscalers",
    ("policy", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("networking.k8s.io", "Ingress"): "ingresses",
    ("networking.k8s.io", "IngressClass"): "ingressclasses",
    ("networking.k8s.io", "NetworkPolicy"): "networkpolicies",
    ("rbac.authorization.k8s.io", "ClusterRole"): "clusterroles",
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): "clusterrolebindings",
    ("rbac.authorization.k8s.io", "Role"): "roles",
    ("rbac.authorization.k8s.io", "RoleBinding"): "rolebindings",
    ("storage.k8s.io", "CSIDriver"): "csidrivers",
    ("storage.k8s.io", "CSINode"): "csinodes",
    ("storage.k8s.io", "StorageClass"): "storageclasses",
    ("storage.k8s.io", "VolumeAttachment"): "volumeattachments",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "customresourcedefinitions",
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): "mutatingwebhookconfigurations",
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): "validatingwebhookconfigurations",
    ("apiregistration.k8s.io", "APIService"): "apiservices",
    ("coordination.k8s.io", "Lease"): "leases",
    ("discovery.k8s.io", "EndpointSlice"): "endpointslices",
    ("events.k8s.io", "Event"): "events",
    ("scheduling.k8s.io", "PriorityClass"): "priorityclasses",
    ("node.k8s.io", "RuntimeClass"): "runtimeclasses",
    ("certificates.k8s.io", "CertificateSigningRequest"): "certificatesigningrequests",
}


def guess_resource(kind: str) -> str:
    """The apiserver's fallback plural (`meta.UnsafeGuessKindToResource`)."""
    singular = kind.lower()
    if not singular:
        return ""
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def group_resource_for(api_version: str, kind: str) -> tuple[GroupResource, str]:
    """(GroupResource, version) for an object's `apiVersion` (`v1`, `apps/v1`) and `kind`."""
    group, _, version = api_version.rpartition("/")
    resource = _KNOWN.get((group, kind)) or guess_resource(kind)
    return GroupResource(group, resource), version
