"""ctest python.test_torch: exits 77 (skipped) without torch, else runs test_torch.py."""
import importlib.util
import sys
import unittest

if importlib.util.find_spec("torch") is None:
    print("torch is not installed: skipped (exit 77)")
    sys.exit(77)
suite = unittest.defaultTestLoader.loadTestsFromName("test_torch")
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
