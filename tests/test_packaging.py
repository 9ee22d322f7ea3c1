"""pyproject.toml, environment.yml, Makefile and CI agree."""
import re
import tomllib

import yaml

from conftest import ROOT


def _name(req):
    return re.split(r"[<>=!~ \[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r.replace(" ", "") for r in project["dependencies"] + project["optional-dependencies"]["course"]}
    wanted["pytorch"] = wanted.pop("torch")  # conda's name for it
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {_name(d): d.replace(" ", "") for d in env["dependencies"] if isinstance(d, str)}
    for name, req in wanted.items():
        assert name in conda, f"environment.yml lacks {name}"
        assert conda[name].removeprefix("pytorch") == req.removeprefix("torch"), f"{name}: {conda[name]} vs {req}"
    py = project["requires-python"].removeprefix(">=")
    assert conda["python"] == f"python>={py}"


def test_runtime_dependencies_stay_small():
    deps = {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert deps == {"torch", "matplotlib", "ipywidgets"}


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.M)


def test_torch_is_installed_before_the_project():
    makefile = (ROOT / "Makefile").read_text()
    assert makefile.index("$(TORCH)") < makefile.index("-e '.[course,dev]'")


def test_declared_floors_are_the_tested_floor():
    """pyproject's lower bounds are exactly the versions the compatibility suite's floor environment installs."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import compat

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {_name(r): r.split(">=")[1].split(",")[0].split()[0] for r in project["dependencies"] if ">=" in r}
    pins = {_name(p): p.split("==")[1] for p in compat.ENVS["floor"]["packages"]}
    for name, floor in floors.items():
        assert pins[name].startswith(floor), f"{name}: pyproject says >={floor}, the floor env tests {pins[name]}"
        assert pins[name].split(".")[:2] == floor.split(".")[:2], f"{name}: the floor env must test the declared minor"
    assert project["requires-python"] == f">={compat.ENVS['floor']['python']}"
    readme = (ROOT / "README.md").read_text()
    for env in ("colab", "floor"):
        for pin in compat.ENVS[env]["packages"]:
            name, version = pin.split("==")
            assert f"{name} {version}" in readme, f"README's support table does not name {name} {version} ({env})"
