"""docs/python.md's quick start runs as written: every ```python block of the page, except the
ones opening with '# needs torch' (python.test_torch runs those)."""
import os
import re
import unittest

from _support import SOURCE_DIR, scratch


def doc_blocks(needs_torch):
    with open(os.path.join(SOURCE_DIR, "docs", "python.md")) as f:
        text = f.read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return [b for b in blocks if b.startswith("# needs torch") == needs_torch]


class PythonQuickStartRuns(unittest.TestCase):
    def test_every_block_runs(self):
        blocks = doc_blocks(needs_torch=False)
        self.assertGreaterEqual(len(blocks), 1, "docs/python.md lost its quick start")
        cwd = os.getcwd()
        os.chdir(scratch())
        try:
            for block in blocks:
                exec(compile(block, "docs/python.md", "exec"), {})
        finally:
            os.chdir(cwd)


if __name__ == "__main__":
    unittest.main()
