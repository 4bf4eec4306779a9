"""gitops-reverser's `configbutler.ai/v1alpha3` custom resources as a configuration source.

`objects` reads the custom resources, `compile` turns a set of them into the providers, targets
and rules of the YAML file (validated by the same pydantic models) with a report per object,
`tenancy` decides what an object outside the controller's namespace may ask for (docs/security.md,
Tenants), `export` writes the custom resources for an existing YAML file (docs/custom-resources.md).
"""
