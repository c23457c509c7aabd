"""Writes the OpenAPI v3 schema of one version of a CustomResourceDefinition as compact
JSON without its descriptions (the prose is most of a generated CRD's size and none of
its rules), for tests/deploy/k8s_schema_test.py to validate manifests against.

    python3 strip_crd.py CRD.yaml VERSION OUT.json

Used for leaderworkerset.x-k8s.io_leaderworkersets.v1.json; SOURCE says from what."""
import json
import sys

import yaml


def strip(schema):
    """`schema` without "description" annotations; property names (which may be
    "description") are kept."""
    if isinstance(schema, list):
        return [strip(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {name: strip(sub) for name, sub in value.items()}
        else:
            out[key] = strip(value)
    return out


def main(path, version, out):
    crd = yaml.safe_load(open(path))
    assert crd["kind"] == "CustomResourceDefinition", path
    found = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert len(found) == 1, "%s: no version %s" % (path, version)
    document = {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"],
                "version": version, "openAPIV3Schema": strip(found[0]["schema"]["openAPIV3Schema"])}
    with open(out, "w") as f:
        json.dump(document, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
