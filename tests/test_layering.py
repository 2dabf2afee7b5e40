"""specsim must import and predict with torch (and transformers) unimportable."""

import subprocess
import sys
import textwrap


def test_specsim_imports_without_torch():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('torch', 'transformers'):
                    raise ImportError('blocked for the layering test: ' + name)
                return None
        sys.meta_path.insert(0, Block())
        import specsim, specsim.cli, specsim.predict, specsim.e2e, specsim.sweep, specsim.profile
        import pkgutil, importlib
        for m in pkgutil.walk_packages(specsim.__path__, 'specsim.'):
            importlib.import_module(m.name)
        parser = specsim.cli.build_parser()
        assert specsim.cli.main(['predict', '--gamma', '5', '--json']) == 0
        assert 'torch' not in sys.modules and 'transformers' not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
