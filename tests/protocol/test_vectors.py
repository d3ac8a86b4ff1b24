"""The checked-in vectors (protocol/vectors/) against the Python codec
(tools/python/tunehost/protocol.py): every valid vector decodes to exactly its
"expect" and re-encodes byte-identically (to "canonical_hex" when the vector is
deliberately non-canonical); every invalid vector fails with its error code,
field name and readable envelope id. The C++ twin is vectors_test.cc."""

import json
import os
import unittest

from tunehost import protocol

VECTORS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "protocol",
                           "vectors")


def load(name):
    with open(os.path.join(VECTORS_DIR, name), encoding="utf-8") as f:
        return json.load(f)


def same_value(a, b):
    """Equality that also tells a float from an int (1.0 vs 1) and a bool from
    an int, so a codec that changed a value's kind fails."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


class ValidVectorsTest(unittest.TestCase):
    def test_decode_matches_expectation_and_reencodes_identically(self):
        vectors = load("vectors.json")
        self.assertGreater(len(vectors), 0)
        for v in vectors:
            with self.subTest(v["name"]):
                expect = v["expect"]
                m = protocol.decode(bytes.fromhex(v["hex"]))
                self.assertEqual(m.v, expect["v"])
                self.assertEqual(m.type, expect["type"])
                self.assertEqual(m.id, expect["id"])
                self.assertTrue(same_value(m.body, expect["body"]),
                                f"decoded {m.body!r}\nexpected {expect['body']!r}")
                again = protocol.encode(m.type, m.body, m.id)
                self.assertEqual(again.hex(), v.get("canonical_hex", v["hex"]))

    def test_every_message_type_has_a_vector(self):
        seen = {v["expect"]["type"] for v in load("vectors.json")}
        self.assertEqual(set(protocol.SCHEMA) - seen, set())

    def test_every_vector_has_a_description(self):
        for v in load("vectors.json") + load("invalid.json"):
            self.assertTrue(v.get("description", "").strip(), v["name"])


class InvalidVectorsTest(unittest.TestCase):
    def test_every_invalid_vector_fails_with_its_code(self):
        invalid = load("invalid.json")
        self.assertGreater(len(invalid), 0)
        for v in invalid:
            with self.subTest(v["name"]):
                limit = v.get("max_message_bytes", protocol.DEFAULT_MAX_MESSAGE_BYTES)
                with self.assertRaises(protocol.ProtocolError) as caught:
                    protocol.decode(bytes.fromhex(v["hex"]), max_message_bytes=limit)
                e = caught.exception
                self.assertEqual(e.code, v["error"], str(e))
                if "field" in v:
                    self.assertEqual(e.field, v["field"], str(e))
                    self.assertIn(v["field"], str(e))
                self.assertEqual(e.msg_id, v["id"])

    def test_every_strict_prefix_of_a_valid_vector_is_a_bad_frame(self):
        for v in load("vectors.json"):
            data = bytes.fromhex(v["hex"])
            for n in range(len(data)):
                with self.assertRaises(protocol.ProtocolError) as caught:
                    protocol.decode(data[:n])
                self.assertEqual(caught.exception.code, protocol.BAD_FRAME, f"{v['name']}[:{n}]")


if __name__ == "__main__":
    unittest.main()
