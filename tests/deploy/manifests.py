"""The Kubernetes side of tests/deploy: Deployments and Services read from the manifests
with PyYAML, the command line the kubelet runs for a container given its image's
ENTRYPOINT and CMD, tpserve's flags read as a name -> value map, and resource
quantities."""
import glob
import re

import yaml

_QUANTITY = re.compile(r"^([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_SCALE = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def load(pattern):
    """{path: [documents]} for every manifest matching the glob pattern."""
    return {path: [d for d in yaml.safe_load_all(open(path)) if d]
            for path in sorted(glob.glob(pattern))}


def of_kind(documents, kind):
    return [d for d in documents if d.get("kind") == kind]


def effective_argv(container, entrypoint, cmd):
    """What the kubelet runs: `command` replaces ENTRYPOINT (and drops CMD), `args`
    replaces CMD."""
    command, args = container.get("command"), container.get("args")
    if command is not None:
        return list(command) + list(args or [])
    return list(entrypoint) + list(cmd if args is None else args)


def help_flags(usage):
    """{name: takes_value} from `tpserve --help` (CLI11's layout: "  --tp,--tensor-parallel-size
    INT=1 ...", a bool flag without a type), every alias included."""
    known = {}
    for m in re.finditer(r"^  (--[a-z0-9-]+(?:,--[a-z0-9-]+)*)( (?:INT|NUMBER|TEXT)\b)?",
                         usage, re.MULTILINE):
        for name in m.group(1).split(","):
            known[name[2:]] = bool(m.group(2))
    return known


def flag_map(arguments, known):
    """{name: value} (True for a bool flag) of a tpserve command line without argv[0],
    in the `--name value` or `--name=value` spellings; ValueError names what is wrong."""
    flags = {}
    words = list(arguments)
    while words:
        word = words.pop(0)
        name, has_value, value = word[2:].partition("=")
        if not word.startswith("--") or name not in known:
            raise ValueError("%r is not a tpserve flag" % word)
        if known[name] and not has_value:
            if not words:
                raise ValueError("--%s has no value" % name)
            value = words.pop(0)
        elif not known[name]:
            if has_value:
                raise ValueError("--%s takes no value" % name)
            value = True
        if name in flags:
            raise ValueError("--%s is given twice" % name)
        flags[name] = value
    return flags


def quantity(value):
    """A Kubernetes quantity ("500m", "768Mi", 2) as a number."""
    m = _QUANTITY.match(str(value))
    if not m:
        raise ValueError("not a quantity: %r" % value)
    return float(m.group(1)) * _SCALE[m.group(2)]


def pod_labels(deployment):
    return deployment["spec"]["template"]["metadata"].get("labels", {})


def selects(selector, labels):
    """Whether a label selector (a plain map) picks pods with these labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())
