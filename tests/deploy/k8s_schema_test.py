"""Every document of deploy/kubernetes/*.yaml against the schema the API server holds it
to, offline and strictly (a field the schema does not name is an error, as it is under
kubectl's server-side field validation, and not silently dropped):
  - the built-in kinds (Deployment, Service, HorizontalPodAutoscaler,
    PodDisruptionBudget, ConfigMap) against the JSON schemas of Kubernetes K8S_VERSION
    that PyPI's kubernetes-validate (KUBERNETES_VALIDATE, pinned with its dependencies)
    carries, installed into a venv of this test's own;
  - each LeaderWorkerSet against the openAPIV3Schema of the LWS CRD committed in
    tests/deploy/schemas/ (schemas/SOURCE: from kubernetes-sigs/lws v0.10.0), its
    metadata as ObjectMeta.
Then the validators are shown to catch what they must (a misspelt field, a wrong type,
a bad enum value, in the LWS and in a Deployment), so that a pass means something.
Every broken rule is reported with its file and document."""
import copy
import json
import sys

sys.path[:0] = ["tests/deploy", "tests/e2e"]
from pypi_venv import reexec_in_venv  # noqa: E402

KUBERNETES_VALIDATE = [
    "kubernetes-validate==1.37.0", "jsonschema==4.26.0", "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0", "rpds-py==2026.9.1", "attrs==26.1.0", "importlib_resources==7.1.0",
    "packaging==26.4", "typing_extensions==4.16.0"]
reexec_in_venv("k8s-schema", KUBERNETES_VALIDATE, "kubernetes_validate")

import jsonschema  # noqa: E402
import kubernetes_validate  # noqa: E402

import manifests  # noqa: E402

K8S_VERSION = "1.33"  # LWS v0.10 supports it; gRPC probes are GA since 1.27
MANIFESTS = "deploy/kubernetes/*.yaml"
LWS_SCHEMA = "tests/deploy/schemas/leaderworkerset.x-k8s.io_leaderworkersets.v1.json"


def strict(schema):
    """`schema` with every object that lists its properties closed to others (what the
    API server does to a CRD's unknown fields: prunes them, or under strict field
    validation refuses them); objects that keep unknown fields stay open."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: ({n: strict(v) for n, v in s.items()} if k == "properties" else strict(s))
           for k, s in schema.items()}
    if ("properties" in out and "additionalProperties" not in out and
            not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


class LwsValidator:
    def __init__(self):
        crd = json.load(open(LWS_SCHEMA))
        self.api_version = "%s/%s" % (crd["group"], crd["version"])
        schema = strict(crd["openAPIV3Schema"])
        # metadata is ObjectMeta, which the CRD leaves to the API server: checked below.
        schema["properties"]["metadata"] = {"type": "object"}
        self.validator = jsonschema.Draft7Validator(schema)

    def errors(self, document):
        if document.get("apiVersion") != self.api_version:
            return ["apiVersion %r is not %s" % (document.get("apiVersion"), self.api_version)]
        found = ["%s: %s" % ("/".join(map(str, e.absolute_path)) or "(top)", e.message)
                 for e in self.validator.iter_errors(document)]
        as_config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": document.get("metadata", {})}
        return found + builtin_errors(as_config_map)


def builtin_errors(document):
    try:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
        return []
    except kubernetes_validate.ValidationError as e:
        return ["%s: %s" % ("/".join(map(str, e.absolute_path)) or "(top)",
                            e.message)]
    except kubernetes_validate.SchemaNotFoundError:
        return ["no schema for %s %s in Kubernetes %s" % (document.get("apiVersion"),
                                                           document.get("kind"), K8S_VERSION)]


def errors_of(document, lws):
    if document.get("kind") == "LeaderWorkerSet":
        return lws.errors(document)
    return builtin_errors(document)


def name_of(document):
    return "%s %s" % (document.get("kind"), document.get("metadata", {}).get("name"))


def mutations(document):
    """(what, a broken copy of `document`) that a validator must refuse."""
    def broken(path, change):
        d = copy.deepcopy(document)
        node = d
        for key in path[:-1]:
            node = node[key]
        change(node, path[-1])
        return d

    def misspell(node, key):
        node[key + "x"] = node.pop(key)

    def set_to(value):
        return lambda node, key: node.__setitem__(key, value)

    if document["kind"] == "LeaderWorkerSet":
        template = ["spec", "leaderWorkerTemplate"]
        container = template + ["workerTemplate", "spec", "containers", 0]
        return [("a misspelt leaderWorkerTemplate.size", broken(template + ["size"], misspell)),
                ("size as a string", broken(template + ["size"], set_to("2"))),
                ("an unknown restartPolicy", broken(template + ["restartPolicy"],
                                                    set_to("Sometimes"))),
                ("a misspelt container field", broken(container + ["args"], misspell)),
                ("a misspelt metadata field", broken(["metadata", "labels"], misspell))]
    if document["kind"] == "Deployment":
        container = ["spec", "template", "spec", "containers", 0]
        return [("a misspelt container field", broken(container + ["args"], misspell)),
                ("a probe's port as a word", broken(container + ["startupProbe", "grpc", "port"],
                                                    set_to("grpc"))),
                ("an unknown strategy field", broken(["spec", "strategy", "type"], misspell))]
    return []


def main():
    lws = LwsValidator()
    failures, checked, kinds = [], 0, set()
    for path, documents in manifests.load(MANIFESTS).items():
        for document in documents:
            where = "%s: %s" % (path, name_of(document))
            failures += ["%s: %s" % (where, e) for e in errors_of(document, lws)]
            checked += 1
            kinds.add(document.get("kind"))
            for what, bad in mutations(document):
                if not errors_of(bad, lws):
                    failures.append("%s: the validator accepts %s" % (where, what))
    for kind in ("Deployment", "Service", "LeaderWorkerSet", "HorizontalPodAutoscaler",
                 "PodDisruptionBudget", "ConfigMap"):
        if kind not in kinds:
            failures.append("%s: no %s to check" % (MANIFESTS, kind))
    for failure in failures:
        print("FAIL " + failure, flush=True)
    if failures:
        sys.exit(1)
    print("PASS %d documents (%s) valid against Kubernetes %s and the LWS v1 CRD, strictly; "
          "misspelt fields, wrong types and bad enum values refused"
          % (checked, ", ".join(sorted(kinds)), K8S_VERSION), flush=True)


if __name__ == "__main__":
    main()
