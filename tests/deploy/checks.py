"""The one PASS/FAIL reporter of the deployment checkers: a line per check, and the exit code.

    checks = Checks("docs")
    checks.check("README names every variable", ok, why)
    sys.exit(checks.exit_code())

A checker that reports under several labels (check_pod.py: one per rendered pod) calls
`labelled` with each check's label instead.
"""


class Checks:
    def __init__(self, label=""):
        self.label = label
        self.failures = 0

    def check(self, name, ok, why=""):
        """Prints `PASS label: name` or `FAIL label: name -- why`; counts the failures."""
        return self.labelled(self.label, name, ok, why)

    def labelled(self, label, name, ok, why=""):
        """`check` under another label."""
        if ok:
            print(f"PASS {label}: {name}")
        else:
            self.failures += 1
            print(f"FAIL {label}: {name} -- {why}")
        return ok

    def exit_code(self):
        return 1 if self.failures else 0
