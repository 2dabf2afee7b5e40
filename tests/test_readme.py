"""README.md keeps exactly two set-up commands, and .ci/run runs the test one verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", setup, flags=re.S)]


def test_two_setup_commands_and_ci_runs_the_test_one():
    blocks = _bash_blocks()
    assert len(blocks) == 2
    main_cmd, test_cmd = blocks
    assert "specsim predict --gamma 5" in main_cmd
    assert "pytest" in test_cmd and "torch==2.13.0" in test_cmd
    assert test_cmd.index("torch==2.13.0") < test_cmd.index("-e")
    assert test_cmd in (ROOT / ".ci" / "run").read_text()
