"""The documentation stays true: every documented command runs (or is listed with the reason it is
not run), every snippet compiles or runs, every link resolves, every documented default is the code's.

The commands of README.md and docs/*.md run in one temporary working folder that looks like the
repository (configs/ and scripts/ linked, data/ a folder of links to the repository's data files),
in document order, with tiny overrides appended to each training run (later overrides win), so a
command that needs a trained model finds the one an earlier command trained, as a reader would.
Scripts run in this process, as `run_cli` runs their `main` (a fresh Python would spend seconds
importing torch for each).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from conftest import PYTHON, REPO_ROOT, load_script

from minigpt.errors import run_cli

DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"


def documentation_pages() -> list[Path]:
    """README first, then the topic pages in name order (the order their commands run in)."""
    return [README, *sorted(DOCS.glob("*.md"))]


# ---- what is run, what is only checked, and why -------------------------------------------------

# Commands never run, by how they start, and why. Their repository paths must still exist.
NOT_RUN = {
    "pip install": "installs packages: the test runs in the installed checkout",
    "python -m pytest": "the test suite itself",
    "accelerate launch": "starts several processes or needs GPUs (tests/test_multiprocess.py launches "
    "two over gloo); here its --config_file is read and the run config and overrides are loaded",
    "srun": "needs several machines",
    "torchrun": "needs several machines",
    "lm_eval": "lm-eval is no dependency, and this one needs a running server (docs/serving.md says what was checked by hand)",
}
# Scripts whose documented commands would take minutes or never end: their --help must list every
# option the command uses.
HELP_ONLY = {
    "scripts/benchmark.py": "minutes of training and generation side by side",
    "scripts/benchmark_data.py": "writes and prepares corpora of tens of MB",
    "scripts/app.py": "serves a web page until Ctrl-C",
    "scripts/chat.py": "reads the terminal until /quit (tests/test_chat_session.py drives it)",
    "scripts/serve.py": "serves until Ctrl-C (tests/test_serving.py starts both engines and stops them)",
    "scripts/benchmark_serving.py": "starts four servers and times them (tests/test_serving.py serves both engines)",
    "scripts/gpu_check.py": "needs a CUDA GPU and minutes, or downloads wheels (tests/test_gpu_check.py runs its dry run)",
}
# Scripts run with the documented arguments, in this process.
RUN = (
    "scripts/train.py",
    "scripts/prepare_data.py",
    "scripts/train_tokenizer.py",
    "scripts/generate.py",
    "scripts/evaluate.py",
    "scripts/push.py",
    "scripts/export.py",
    "scripts/build_chat_data.py",
    "scripts/run_page.py",
)
# Python snippets only compiled, by a line they contain, and why.
PYTHON_COMPILE_ONLY = {
    "api.upload_folder(": "uploads to the real hub: the network and a login",
    "callbacks=[my_callback]": "a fragment: my_callback is the reader's own",
    'OpenAI(base_url="http://127.0.0.1:8000/v1"': "needs a running server: tests/test_serving.py sends these requests",
}

# Appended to every documented `scripts/train.py` command: a model that trains in a second, on
# the documented data. Later overrides win, so these replace the command's own values.
TINY_TRAINING = [
    "training.max_steps=3",
    "training.max_time=null",
    "training.budget=null",  # a documented budget would size and train a real model (tests/test_sizing.py)
    "training.warmup_steps=1",
    "training.logging_steps=1",
    "training.eval_steps=100",
    "training.save_steps=100",
    "training.sample_steps=100",
    "training.sample_max_new_tokens=4",
    "hardware.per_device_train_batch_size=2",
    "hardware.per_device_eval_batch_size=64",
    "hardware.use_cpu=true",
    "hardware.bf16=false",
    "hardware.tf32=null",  # GPU profiles' TF32 refuses a CPU
    "hardware.torch_compile=false",
    "hardware.torch_num_threads=1",
    "hardware.dataloader_num_workers=0",
    "hardware.keep_freed_memory=false",  # glibc's setting cannot be undone in this process
    "hardware.peak_flops=1.0e12",  # no measured matmul
    "data.num_proc=1",
    "data.show_progress=false",
    "tokenizer.show_progress=false",
]
# Left out for a run from a trained base (`model.init_from`), whose architecture and tokenizer are
# the base's: the context stays the shipped configs' 128, so configs/continue.yaml fits the base.
TINY_MODEL = [
    "model.hidden_size=32",
    "model.num_hidden_layers=1",
    "model.num_attention_heads=2",
    "tokenizer.vocab_size=300",
]


# ---- reading markdown ---------------------------------------------------------------------------


@dataclass
class Block:
    """A fenced code block: its language, its text and where it starts."""

    language: str
    text: str
    where: str  # "page:line"


def fenced_blocks(text: str, page: str = "page") -> list[Block]:
    blocks, language, lines, start = [], None, [], 0
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^(\s*)```(\S*)\s*$", line)
        if fence and language is None:
            language, lines, start = fence.group(2), [], number
        elif fence and language is not None:
            blocks.append(Block(language, "\n".join(lines), f"{page}:{start}"))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code (where a link or heading means one)."""
    outside = re.sub(r"^\s*```.*?^\s*```\s*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", outside)


@dataclass
class Command:
    """One documented command: environment prefix, argv, and where it is written."""

    env: dict[str, str]
    argv: list[str]
    where: str

    def __str__(self) -> str:
        prefix = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{prefix} {shlex.join(self.argv)}".strip()


def commands_in(block: Block) -> list[Command]:
    """The commands of a bash block: continuation lines joined, comments dropped, `&&` chains split."""
    commands = []
    for line in block.text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            part, words = words[:cut], words[cut + 1 :]
            env = {}
            while part and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", part[0]):
                name, _, value = part.pop(0).partition("=")
                env[name] = value
            if part:
                commands.append(Command(env, part, block.where))
    return commands


def console_examples(block: Block) -> list[tuple[Command, list[str]]]:
    """`$ command` lines of a console block, each with the output lines shown under it."""
    examples: list[tuple[Command, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            examples.append((Command({}, shlex.split(line[2:]), block.where), []))
        elif examples and line.strip():
            examples[-1][1].append(line.strip())
    return examples


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens,
    repeats numbered."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in re.sub(r"^\s*```.*?^\s*```\s*$", "", text, flags=re.S | re.M).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def link_problems(page: Path, text: str) -> list[str]:
    """Relative links and anchors of `text` (written in `page`) that lead nowhere."""
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose(text)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        if not path_part:  # an anchor in this page
            if anchor not in heading_anchors(text):
                problems.append(f"{page.name}: link to {target}: no heading #{anchor} in this page")
            continue
        destination = (page.parent / path_part).resolve()
        if not destination.exists():
            problems.append(f"{page.name}: link to {target}: {path_part} does not exist")
            continue
        if anchor:
            if destination.suffix != ".md":
                problems.append(f"{page.name}: link to {target}: an anchor into a file that is not markdown")
            elif anchor not in heading_anchors(destination.read_text(encoding="utf-8")):
                problems.append(f"{page.name}: link to {target}: no heading #{anchor} in {destination.name}")
    return problems


# ---- documented defaults -----------------------------------------------------------------------


def documented_tables(text: str, heading: str) -> dict[str, dict[str, str]]:
    """{section: {key: cell}} from the tables under headings matching `heading` (one group: the
    section), rows whose first cell is a key in backticks and second its value."""
    tables: dict[str, dict[str, str]] = {}
    section = None
    for line in text.splitlines():
        match = re.match(heading, line)
        if match:
            section = match.group(1)
            tables[section] = {}
        elif line.startswith("#"):
            section = None
        elif section is not None and line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            tables[section][cells[0].strip("`")] = cells[1]
    return tables


def documented_value(cell: str, expected: object) -> object:
    """A table cell read as YAML (backticks and escaped pipes removed), typed like `expected`."""
    value = yaml.safe_load(cell.replace("\\|", "|").strip().strip("`"))
    if isinstance(expected, float) and not isinstance(value, bool) and isinstance(value, int | str):
        with contextlib.suppress(ValueError):
            value = float(value)
    return value


def default_problems(text: str, sections: dict[str, type]) -> list[str]:
    """Keys missing from, or extra in, configuration.md's tables, and defaults that differ. A section
    that also takes TrainingArguments fields lists its own keys and the Trainer keys whose default
    MiniGPT changes; it may list other Trainer keys, with Trainer's default."""
    from minigpt.training.settings import section_types

    tables = documented_tables(text, r"^## The `(\w+)` section")
    problems = []
    for section, cls in sections.items():
        documented, default = tables.get(section, {}), cls()
        values = default.to_dict() if hasattr(default, "to_dict") else dataclasses.asdict(default)
        keys = section_types(cls)
        for key in [*values, *(k for k in documented if k not in values)]:
            if key not in keys:
                problems.append(f"{section}.{key} is documented but not a setting")
            elif key not in documented:
                problems.append(f"{section}.{key} is not documented")
            elif (value := documented_value(documented[key], getattr(default, key))) != getattr(default, key):
                problems.append(f"{section}.{key}: documented default {value!r}, the code's {getattr(default, key)!r}")
    return problems


def run_value_problems(text: str, run: object) -> list[str]:
    """Rows `| `section.key` | value |` of `text` whose value is not the run config's."""
    problems = []
    for key, cell in documented_tables(text, r"^## (The default model)")["The default model"].items():
        section, _, name = key.partition(".")
        actual = getattr(getattr(run, section), name)
        if documented_value(cell, actual) != actual:
            problems.append(f"README: {key} is {cell}, the default config's {actual!r}")
    return problems


# ---- running documented commands ----------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    output: str


@dataclass
class Runner:
    """Runs documented commands in `folder`, in this process, and says what went wrong."""

    folder: Path
    done: set[tuple] = field(default_factory=set)
    helps: dict[str, str] = field(default_factory=dict)
    modules: dict = field(default_factory=dict)

    def help_text(self, script: str) -> str:
        if script not in self.helps:
            result = subprocess.run(
                [PYTHON, str(REPO_ROOT / script), "--help"], capture_output=True, text=True, timeout=120
            )
            self.helps[script] = result.stdout + result.stderr
        return self.helps[script]

    def option_problems(self, command: Command, script: str) -> list[str]:
        """Options the command uses that the script's --help does not list."""
        text = self.help_text(script)
        options = {word.partition("=")[0] for word in command.argv if word.startswith("--")}
        return [
            f"{command.where}: `{command}`: {script} --help lists no {o}"
            for o in sorted(options)
            if o not in text
        ]

    def script_main(self, script: str, args: list[str]) -> Outcome:
        """`python <script> args` as `run_cli` runs it: exit code and everything printed."""
        name = Path(script).stem
        if name not in self.modules:
            self.modules[name] = load_script(name)
        main = self.modules[name].main
        takes_argv = bool(inspect.signature(main).parameters)
        output = io.StringIO()
        environment = dict(os.environ)
        saved_argv, saved_cwd = sys.argv, os.getcwd()
        sys.argv = [script, *args]
        os.chdir(self.folder)
        try:
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                run_cli(lambda: main(args) if takes_argv else main())
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except Exception as error:  # a traceback is a failed command too
            code, output = 1, io.StringIO(f"{output.getvalue()}\n{type(error).__name__}: {error}")
        finally:
            sys.argv = saved_argv
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(environment)
        return Outcome(code, output.getvalue())

    def training_arguments(self, args: list[str]) -> list[str]:
        """`args` of `scripts/train.py` with the tiny overrides appended (model keys only when the
        run trains its own model)."""
        from minigpt.training.run_config import load_run_config

        items = [a for a in args if not a.startswith("--")]
        config = items[0] if items and "=" not in items[0] else "configs/shakespeare.yaml"
        overrides = items[1:] if items and "=" not in items[0] else items
        with contextlib.chdir(self.folder):
            from_base = load_run_config(config, overrides).model.init_from is not None
        # A resumed run goes on past the end of the tiny run it resumes (the docs resume a stopped run).
        further = ["training.max_steps=5"] if "--resume" in args else []
        return [*args, *TINY_TRAINING, *([] if from_base else TINY_MODEL), *further]

    def check(self, command: Command) -> list[str]:
        """Run or check one documented command; the problems found."""
        argv, where = command.argv, f"{command.where}: `{command}`"
        text = " ".join(argv)
        for prefix, _reason in NOT_RUN.items():
            if text.startswith(prefix):
                return self.not_run_problems(command)
        if argv[:2] == ["python", "-c"]:
            return self.run_python_c(command)
        if argv[0] != "python" or len(argv) < 2 or not argv[1].startswith("scripts/"):
            return [f"{where}: neither run nor listed in NOT_RUN with a reason"]
        script, args = argv[1], argv[2:]
        if not (REPO_ROOT / script).is_file():
            return [f"{where}: {script} does not exist"]
        problems = self.option_problems(command, script) + self.path_problems(command)
        if script in HELP_ONLY:
            return problems
        if script not in RUN:
            return [*problems, f"{where}: {script} is neither in RUN nor in HELP_ONLY"]
        key = (tuple(sorted(command.env.items())), tuple(argv))
        if key in self.done:  # the same command twice in the docs: once is enough
            return problems
        self.done.add(key)
        if script == "scripts/train.py":
            try:
                args = self.training_arguments(args)
            except Exception as error:
                return [*problems, f"{where}: its config does not load: {error}"]
        outcome = self.script_main(script, args)
        if outcome.code != 0:
            problems.append(f"{where}: exit code {outcome.code}:\n{outcome.output[-2000:]}")
        return problems

    def not_run_problems(self, command: Command) -> list[str]:
        """A command not run: the repository paths it names exist; an `accelerate launch` reads its
        --config_file and loads its run config with its overrides."""
        problems = self.path_problems(command)
        argv = command.argv
        if argv[:2] == ["accelerate", "launch"]:
            if "--config_file" in argv:
                accelerate_file = REPO_ROOT / argv[argv.index("--config_file") + 1]
                yaml.safe_load(accelerate_file.read_text(encoding="utf-8"))
            script = next((i for i, word in enumerate(argv) if word.startswith("scripts/")), None)
            if script is None:
                return [*problems, f"{command.where}: `{command}` launches no script"]
            problems += self.option_problems(Command({}, argv[script:], command.where), argv[script])
            if argv[script] == "scripts/train.py":
                try:
                    self.training_arguments(argv[script + 1 :])
                except Exception as error:
                    problems.append(f"{command.where}: `{command}`: its config does not load: {error}")
        return problems

    def path_problems(self, command: Command) -> list[str]:
        return [
            f"{command.where}: `{command}` names {word}, which does not exist"
            for word in command.argv
            if re.match(r"(configs|scripts)/", word) and not (REPO_ROOT / word.split("=")[-1]).exists()
        ]

    def run_python_c(self, command: Command) -> list[str]:
        key = (tuple(sorted(command.env.items())), tuple(command.argv))
        if key in self.done:
            return []
        self.done.add(key)
        env = {**os.environ, **command.env}
        result = subprocess.run(
            [PYTHON, *command.argv[1:]], cwd=self.folder, env=env, capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            return [f"{command.where}: `{command}`: exit code {result.returncode}:\n{result.stderr[-2000:]}"]
        return []

    def run_python(self, block: Block) -> list[str]:
        """Compile a python block; run it in the folder unless PYTHON_COMPILE_ONLY lists it."""
        try:
            code = compile(block.text, block.where, "exec")
        except SyntaxError as error:
            return [f"{block.where}: python block does not compile: {error}"]
        if any(marker in block.text for marker in PYTHON_COMPILE_ONLY):
            return []
        saved = os.getcwd()
        os.chdir(self.folder)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(code, {"__name__": "__docs__"})
        except Exception as error:
            return [f"{block.where}: python block fails: {type(error).__name__}: {error}"]
        finally:
            os.chdir(saved)
        return []

    def run_console(self, block: Block) -> list[str]:
        """`$ command` examples: the command runs and prints each line shown (an `error:` line: exit 2)."""
        problems = []
        for command, shown in console_examples(block):
            if command.argv[:1] != ["python"] or len(command.argv) < 2 or command.argv[1] not in RUN:
                problems.append(f"{block.where}: `{command}`: console examples run scripts in RUN only")
                continue
            outcome = self.script_main(command.argv[1], command.argv[2:])
            wanted = 2 if any(line.startswith("error:") for line in shown) else 0
            if outcome.code != wanted:
                problems.append(f"{block.where}: `{command}`: exit code {outcome.code}, not {wanted}")
            problems += [
                f"{block.where}: `{command}` does not print: {line}"
                for line in shown
                if line not in outcome.output
            ]
        return problems

    def check_page(self, page: Path) -> list[str]:
        problems = []
        for block in fenced_blocks(page.read_text(encoding="utf-8"), page.name):
            if block.language == "bash":
                for command in commands_in(block):
                    problems += self.check(command)
            elif block.language == "python":
                problems += self.run_python(block)
            elif block.language == "console":
                problems += self.run_console(block)
        return problems


@contextlib.contextmanager
def docs_folder(root: Path) -> Iterator[Path]:
    """A working folder that looks like the repository to the documented commands: configs/ and
    scripts/ linked, data/ a real folder (commands write into it) of links to the shipped data."""
    root.mkdir()
    (root / "configs").symlink_to(REPO_ROOT / "configs")
    (root / "scripts").symlink_to(REPO_ROOT / "scripts")
    (root / "data").mkdir()
    for shipped in (REPO_ROOT / "data").iterdir():
        if shipped.is_file():
            (root / "data" / shipped.name).symlink_to(shipped)
    yield root


# ---- the tests ----------------------------------------------------------------------------------


def test_every_documented_command_and_snippet_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with docs_folder(tmp_path / "work") as folder:
        runner = Runner(folder)
        problems = [problem for page in documentation_pages() for problem in runner.check_page(page)]
    assert not problems, "\n\n".join(problems)


def test_every_link_and_anchor_resolves():
    pages = [*documentation_pages(), *sorted((DOCS / "benchmarks").glob("*.md"))]
    problems = [p for page in pages for p in link_problems(page, page.read_text(encoding="utf-8"))]
    assert not problems, "\n".join(problems)


def test_readme_links_every_docs_page():
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README.read_text(encoding="utf-8")))
    missing = [f"docs/{p.name}" for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in linked]
    assert not missing, f"README links none of {missing}"


def test_configuration_page_lists_every_key_with_the_code_default():
    from minigpt.training.settings import SECTIONS

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    problems = default_problems(text, SECTIONS)
    assert not problems, "\n".join(problems)


def test_readme_describes_the_default_run_as_configured():
    from minigpt import MiniGPTConfig, MiniGPTForCausalLM
    from minigpt.training.run_config import load_run_config

    text = README.read_text(encoding="utf-8")
    run = load_run_config(REPO_ROOT / "configs" / "shakespeare.yaml")
    assert not run_value_problems(text, run)
    model = MiniGPTForCausalLM(MiniGPTConfig(vocab_size=run.tokenizer.vocab_size, **run.model.architecture()))
    parameters = sum(p.numel() for p in model.parameters())
    assert f"{parameters / 1e6:.2f}M" in text  # "a 1.07M-parameter model"
    assert run.training.max_time is None  # a run of fixed work: the same model on every machine
    assert f"for {run.training.max_steps} steps" in text  # "a 1.07M-parameter model for 2500 steps"
    assert len(text.splitlines()) <= 250


def test_every_config_key_has_a_reason_and_no_history():
    problems = []
    for path in sorted([*(REPO_ROOT / "configs").glob("*.yaml"), *(REPO_ROOT / "configs").glob("*/*.yaml")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(REPO_ROOT)}:{number}"
            if re.search(r"\b20\d\d-\d\d-\d\d\b|README", line):
                problems.append(f"{where}: a date or a README reference (figures go to docs/research-log.md)")
            if re.match(r"\s*[\w-]+:", line) and "#" not in line:
                problems.append(f"{where}: a key without a one-line reason")
    assert not problems, "\n".join(problems)


# ---- each checker can fail ----------------------------------------------------------------------


def test_the_command_checker_reports_broken_and_unlisted_commands(tmp_path):
    block = Block(
        "bash", "make everything\npython scripts/generate.py runs/x --no-such-flag  # a comment", "t.md:1"
    )
    runner = Runner(tmp_path)
    unlisted, unknown_option = (runner.check(c) for c in commands_in(block))
    assert unlisted and "neither run nor listed" in unlisted[0]
    assert any("lists no --no-such-flag" in p for p in unknown_option)
    with docs_folder(tmp_path / "work") as folder:
        broken = Runner(folder).check(
            Command({}, ["python", "scripts/train.py", "training.max_stepz=3"], "t.md:3")
        )
    assert broken and "does not load" in broken[0] and "max_stepz" in broken[0]


def test_commands_are_split_as_a_shell_reads_them():
    block = Block(
        "bash",
        'pip install -e ".[ui]" && A=1 python -c \'print("#")\'  # note\npython \\\n  scripts/x.py',
        "t",
    )
    commands = commands_in(block)
    assert [c.argv for c in commands] == [
        ["pip", "install", "-e", ".[ui]"],
        ["python", "-c", 'print("#")'],
        ["python", "scripts/x.py"],
    ]
    assert commands[1].env == {"A": "1"}


def test_the_console_checker_reports_a_line_not_printed(tmp_path):
    with docs_folder(tmp_path / "work") as folder:
        block = Block(
            "console", "$ python scripts/train.py training.max_step=10\nerror: something else", "t.md:1"
        )
        problems = Runner(folder).run_console(block)
    assert problems == [
        "t.md:1: `python scripts/train.py training.max_step=10` does not print: error: something else"
    ]


def test_the_python_checker_reports_a_failing_snippet(tmp_path):
    assert Runner(tmp_path).run_python(Block("python", "import no_such_module_anywhere", "t.md:1"))
    assert Runner(tmp_path).run_python(Block("python", "def (", "t.md:1"))
    assert not Runner(tmp_path).run_python(Block("python", "x = 1 + 1", "t.md:1"))


def test_the_link_checker_reports_missing_files_and_anchors(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading, with words\n")
    page = tmp_path / "page.md"
    text = (
        "[ok](other.md#a-code-heading-with-words) [ok](#here) [web](https://example.com/x)\n"
        "[gone](missing.md) [no anchor](other.md#nowhere)\n`[in code](missing.md)`\n# Here\n"
    )
    problems = link_problems(page, text)
    assert len(problems) == 2
    assert "missing.md does not exist" in problems[0] and "no heading #nowhere" in problems[1]


def test_the_default_checker_reports_wrong_missing_and_extra_keys():
    @dataclass
    class Section:
        steps: int = 10
        rate: float = 1e-3
        name: str = "x"

    text = (
        "## The `demo` section\n\n| key | default | what |\n|---|---|---|\n"
        "| `steps` | `11` | wrong |\n| `rate` | `1.0e-3` | right |\n| `ghost` | `1` | not a key |\n"
    )
    problems = default_problems(text, {"demo": Section})
    assert problems == [
        "demo.steps: documented default 11, the code's 10",
        "demo.name is not documented",
        "demo.ghost is documented but not a setting",
    ]


def test_the_readme_checker_reports_a_value_that_is_not_the_config():
    from minigpt.training.run_config import load_run_config

    run = load_run_config(REPO_ROOT / "configs" / "shakespeare.yaml")
    text = "## The default model\n\n| key | value | what |\n|---|---|---|\n| `model.hidden_size` | 192 | width |\n"
    assert run_value_problems(text, run) == ["README: model.hidden_size is 192, the default config's 128"]
