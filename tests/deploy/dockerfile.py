"""Reads a Dockerfile as far as tests/deploy needs it: its stages and instructions
(line continuations joined, comments dropped), exec-form (JSON) arguments, the packages
that a RUN installs with apt-get, and the sources and destination of a COPY."""
import json
import shlex

_SEPARATORS = {"&&", "||", ";", "|"}


class Instruction:
    def __init__(self, keyword, rest, line):
        self.keyword = keyword  # upper case: "RUN", "COPY", ...
        self.rest = rest        # the text after the keyword, continuations joined
        self.line = line        # where it starts in the file, 1-based


def stages(path):
    """[[Instruction]]: one list per stage, each starting with its FROM."""
    result = []
    pending, start = [], None
    for number, raw in enumerate(open(path), 1):
        line = raw.rstrip("\n")
        if line.lstrip().startswith("#") or (not pending and not line.strip()):
            continue
        if start is None:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        keyword, _, rest = " ".join(pending).strip().partition(" ")
        instruction = Instruction(keyword.upper(), rest.strip(), start)
        if instruction.keyword == "FROM":
            result.append([])
        if not result:
            raise ValueError("%s:%d: %s before the first FROM" % (path, start, keyword))
        result[-1].append(instruction)
        pending, start = [], None
    return result


def stage_name(stage):
    """The name a stage's FROM gives it (FROM IMAGE AS NAME), or None."""
    words = stage[0].rest.split()
    return words[2] if len(words) == 3 and words[1].upper() == "AS" else None


def stage_base(stage):
    """The image or stage a stage starts FROM."""
    return stage[0].rest.split()[0]


def image_instructions(all_stages, target=None):
    """[Instruction] that make the image of stage `target` (default: the last stage, as a
    build without --target makes): its own after those of the stages it is built FROM,
    in order. ValueError for an unknown target."""
    by_name = {stage_name(s): s for s in all_stages if stage_name(s)}
    if target is None:
        stage = all_stages[-1]
    elif target in by_name:
        stage = by_name[target]
    else:
        raise ValueError("no stage named %s" % target)
    chain = [stage]
    while stage_base(chain[0]) in by_name:
        chain.insert(0, by_name[stage_base(chain[0])])
    return [i for s in chain for i in s]


def find(stage, keyword):
    """The stage's last `keyword` instruction (the one that takes effect), or None."""
    matches = [i for i in stage if i.keyword == keyword]
    return matches[-1] if matches else None


def exec_form(text):
    """The argument list of ENTRYPOINT/CMD ["a", "b"]; None for the shell form."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def apt_packages(stage):
    """Every package that the stage's RUN instructions name after `apt-get install`."""
    packages = []
    for run in (i for i in stage if i.keyword == "RUN"):
        words = shlex.split(run.rest)
        for k in range(len(words) - 1):
            if words[k] != "apt-get" or "install" not in words[k + 1:k + 4]:
                continue
            rest = words[k + words[k:].index("install") + 1:]
            for word in rest:
                if word in _SEPARATORS:
                    break
                if not word.startswith("-"):
                    packages.append(word)
    return packages


def copies(stage):
    """[(options, sources, destination)] of the stage's COPY instructions (shell form)."""
    result = []
    for copy in (i for i in stage if i.keyword == "COPY"):
        words = shlex.split(copy.rest)
        options = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        result.append((options, paths[:-1], paths[-1]))
    return result


def healthcheck_command(text):
    """The exec-form command of HEALTHCHECK [OPTIONS] CMD [...]; None otherwise."""
    _, found, command = text.partition("CMD ")
    return exec_form(command) if found else None
