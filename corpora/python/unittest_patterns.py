"""unittest idioms: a drafting corpus, read as text and never imported."""

import os
import shutil
import tempfile
import unittest
from pathlib import Path
from unittest import mock


class TestExample(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.shared = {"key": "value"}

    def setUp(self):
        self.tmpdir = tempfile.mkdtemp()
        self.path = Path(self.tmpdir) / "data.txt"
        self.path.write_text("hello\n", encoding="utf-8")

    def tearDown(self):
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def test_read(self):
        self.assertEqual(self.path.read_text(encoding="utf-8"), "hello\n")

    def test_exists(self):
        self.assertTrue(self.path.exists())
        self.assertFalse(os.path.exists(os.path.join(self.tmpdir, "missing.txt")))

    def test_raises(self):
        with self.assertRaises(ValueError):
            int("not a number")

    def test_almost_equal(self):
        self.assertAlmostEqual(0.1 + 0.2, 0.3, places=7)

    def test_in(self):
        self.assertIn("key", self.shared)
        self.assertNotIn("other", self.shared)

    def test_is_none(self):
        self.assertIsNone(self.shared.get("other"))
        self.assertIsNotNone(self.shared.get("key"))

    def test_subtests(self):
        for value in (1, 2, 3):
            with self.subTest(value=value):
                self.assertGreater(value, 0)

    @mock.patch("os.getcwd", return_value="/tmp")
    def test_patch(self, mock_getcwd):
        self.assertEqual(os.getcwd(), "/tmp")
        mock_getcwd.assert_called_once()

    def test_mock_object(self):
        client = mock.Mock()
        client.get.return_value = {"status": "ok"}
        self.assertEqual(client.get("/health"), {"status": "ok"})
        client.get.assert_called_once_with("/health")

    @unittest.skipIf(os.name == "nt", "not supported on Windows")
    def test_posix_only(self):
        self.assertEqual(os.sep, "/")


if __name__ == "__main__":
    unittest.main()
