"""The web UI in a real browser: Debian's chromium, headless, driven by
chromedriver through python3-selenium, against real `tunehost run` and
`tunehost view` processes; and the UI's access rules over plain HTTP.

Screenshots go to TUNEHOST_TEST_ARTIFACTS (ctest: <build>/test-artifacts/web-ui).
Without chromium the browser tests are skipped, unless
TUNEHOST_TEST_REQUIRE_BROWSER=1 (as ctest sets it), when they fail.
"""
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import textwrap
import unittest
import urllib.error
import urllib.request

import harness

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = os.environ.get("TUNEHOST_TEST_ARTIFACTS",
                           os.path.join(tempfile.gettempdir(), "tunehost-test-artifacts"))

# Each trial reports three intermediate values, then waits until the test
# releases it (release/<trial id> or release/all) and reports its FINAL.
TRIAL = """
import json, os, sys, time
p = json.loads(os.environ["TUNEHOST_PARAMETERS"])
out = os.fdopen(int(os.environ["TUNEHOST_METRIC_FD"]), "w", buffering=1)
x = float(p["x"]) + (0.5 if p["opt"] == "b" else 0.0)
for step in range(3):
    out.write(json.dumps({"value": x * (step + 1) / 3.0}) + "\\n")
release = os.path.join(sys.argv[1], "release")
trial = os.environ["TUNEHOST_TRIAL_ID"]
deadline = time.time() + 120
while time.time() < deadline:
    if os.path.exists(os.path.join(release, "all")) or os.path.exists(os.path.join(release, trial)):
        break
    time.sleep(0.05)
out.write(json.dumps({"type": "FINAL", "value": x}) + "\\n")
"""

# A parameter whose name and value are markup: shown as text, never run (an
# alert would stop every later browser command of the test).
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
HOSTILE_VALUE = "</script><script>alert(2)</script>"


def browser_missing():
    if importlib.util.find_spec("selenium") is None:
        return "python3-selenium is not installed"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return path + " is not installed"
    return None


def require_browser(test):
    missing = browser_missing()
    if missing and os.environ.get("TUNEHOST_TEST_REQUIRE_BROWSER") != "1":
        return unittest.skip(missing)(test)
    return test


def start_browser(profile_dir):
    """Headless chromium and a chromedriver attached to it, both of our own,
    both on 127.0.0.1 ports: selenium's Service and chromedriver's own
    launch connect to "localhost", which a minimal Debian root (no
    /etc/hosts) cannot resolve. quit_browser ends all three."""
    from selenium import webdriver
    processes = []

    def start(command, port, name):
        log = open(os.path.join(profile_dir, name + ".log"), "w")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        log.close()
        processes.append(process)

        def listening():
            if process.poll() is not None:
                raise AssertionError("%s exited with code %d" % (name, process.returncode))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        harness.wait_for(listening, 60, "%s on port %d" % (name, port))

    try:
        devtools, driver_port = harness.free_ports(2)
        start([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--window-size=1280,2400",
               "--user-data-dir=" + os.path.join(profile_dir, "profile"), "--no-first-run",
               "--disable-extensions", "--remote-debugging-address=127.0.0.1",
               "--remote-debugging-port=%d" % devtools, "about:blank"], devtools, "chromium")
        start([CHROMEDRIVER, "--port=%d" % driver_port], driver_port, "chromedriver")
        options = webdriver.ChromeOptions()
        options.debugger_address = "127.0.0.1:%d" % devtools
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Remote(command_executor="http://127.0.0.1:%d" % driver_port,
                                  options=options)
    except BaseException:
        for process in processes:
            process.kill()
            process.wait()
        raise
    driver.tunehost_processes = processes
    return driver


def quit_browser(driver):
    try:
        driver.quit()
    finally:
        for process in driver.tunehost_processes:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def severe(driver):
    """The console errors (and failed loads) the page logged since last asked."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(driver, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    driver.save_screenshot(os.path.join(ARTIFACTS, name + ".png"))


def write_experiment(tmp, max_trials, concurrency):
    with open(os.path.join(tmp, "trial.py"), "w", encoding="utf-8") as f:
        f.write(TRIAL)
    os.makedirs(os.path.join(tmp, "release"), exist_ok=True)
    config = os.path.join(tmp, "experiment.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent("""
            experimentName: web ui test
            searchSpace:
              x: {_type: uniform, _value: [0, 1]}
              opt: {_type: choice, _value: [a, b]}
              %s: {_type: choice, _value: [%s]}
            trialCommand: %s trial.py %s
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: %d
            maxTrialNumber: %d
            tuner: {name: random, classArgs: {seed: 5, optimize_mode: maximize}}
            """ % (json.dumps(HOSTILE_NAME), json.dumps(HOSTILE_VALUE), sys.executable, tmp, tmp,
                   tmp, concurrency, max_trials)))
    return config


class RunningExperiment:
    """`tunehost run` with the web UI on a free loopback port."""

    def __init__(self, max_trials=6, concurrency=2, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="tunehost-webui-")
        config = write_experiment(self.tmp, max_trials, concurrency)
        self.summary = os.path.join(self.tmp, "summary.json")
        self.out = open(os.path.join(self.tmp, "run.out"), "w+")
        self.proc = subprocess.Popen(
            [harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR, "--id", "webui",
             "--summary-json", self.summary] + list(extra),
            cwd=self.tmp, stdout=self.out, stderr=subprocess.STDOUT, text=True)
        self.dir = os.path.join(self.tmp, "webui")
        self.host = harness.host_file(self.dir, self.proc.pid, timeout=60)
        self.url = self.host["ui"]

    def output(self):
        with open(self.out.name, encoding="utf-8") as f:
            return f.read()

    def release(self, name="all"):
        open(os.path.join(self.tmp, "release", name), "w").close()

    def finish(self, timeout=120):
        self.release()
        self.proc.wait(timeout=timeout)
        with open(self.summary, encoding="utf-8") as f:
            return json.load(f)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()


def http(url, method="GET", body=None, headers=None):
    """(status, parsed JSON or text) of one request, 4xx and 5xx included."""
    request = urllib.request.Request(url, method=method, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class WebUiAccessTest(unittest.TestCase):
    """Tokens, roles and Host checks, over plain HTTP."""

    def test_tokens_roles_and_host_header(self):
        run = RunningExperiment(max_trials=2, concurrency=1)
        self.addCleanup(run.close)
        base, _, admin = run.url.partition("/?token=")
        self.assertTrue(base.startswith("http://127.0.0.1:"), run.url)
        # host.json (the user's own file) has the admin URL; stdout says it too.
        self.assertEqual(os.stat(os.path.join(run.dir, "host.json")).st_mode & 0o777, 0o600)
        harness.wait_for(lambda: run.url in run.output(), 30, "the URL printed")

        status, body = http(base + "/api/status")
        self.assertEqual(status, 401)
        self.assertIn("token", body["message"])
        status, body = http(base + "/api/status", headers={"Authorization": "Bearer nope"})
        self.assertEqual(status, 401)
        status, body = http(base + "/", headers={})
        self.assertEqual(status, 401)
        self.assertIn("?token=", body)

        bearer = {"Authorization": "Bearer " + admin}
        status, body = http(base + "/api/status", headers=bearer)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["experiment_id"], "webui")
        # A name the server is not reached by (DNS rebinding) is refused.
        status, _ = http(base + "/api/status", headers=dict(bearer, Host="evil.example:80"))
        self.assertEqual(status, 403)

        running = harness.wait_for(
            lambda: [t for t in http(base + "/api/trials", headers=bearer)[1]["trials"]
                     if t["status"] == "RUNNING"], 60, "a running trial")
        trial = running[0]["trial_id"]
        kill = base + "/api/trials/%s/kill" % trial
        # Changes need a JSON body (no cross-site form posts) ...
        status, body = http(kill, "POST", b"{}", dict(bearer, **{"Content-Type": "text/plain"}))
        self.assertEqual(status, 400, body)
        # ... and the admin token: the viewer one (from /?token=) gets 403.
        viewer = self.viewer_token(run)
        status, body = http(kill, "POST", b"{}", {"Authorization": "Bearer " + viewer,
                                                   "Content-Type": "application/json"})
        self.assertEqual(status, 403, body)
        status, body = http(base + "/api/limits", "POST", b'{"concurrency": -1}',
                            dict(bearer, **{"Content-Type": "application/json"}))
        self.assertEqual(status, 400, body)
        status, body = http(base + "/api/limits", "POST", b'{"concurrency": 0}',
                            dict(bearer, **{"Content-Type": "application/json"}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"], "bad_field")
        status, body = http(base + "/api/limits", "POST", b"[1, 2",
                            dict(bearer, **{"Content-Type": "application/json"}))
        self.assertEqual(status, 400, body)
        status, body = http(base + "/api/limits", "POST", b" " * (100 * 1024),
                            dict(bearer, **{"Content-Type": "application/json"}))
        self.assertEqual(status, 413, body)
        status, body = http(base + "/api/trials/no-such-trial/kill", "POST", b"{}",
                            dict(bearer, **{"Content-Type": "application/json"}))
        self.assertEqual(status, 404, body)
        status, body = http(kill, "POST", b"{}", dict(bearer, **{"Content-Type": "application/json"}))
        self.assertEqual(status, 200, body)
        harness.wait_for(
            lambda: http(base + "/api/trials", headers=bearer)[1]["trials"][0]["status"]
            == "USER_CANCELED", 30, "the killed trial to end")
        summary = run.finish()
        self.assertEqual(summary["status"], "DONE")
        self.assertIn("USER_CANCELED", [t["status"] for t in summary["trials"]])

    def viewer_token(self, run):
        """The viewer token, from the read-only link an admin's session has
        to share."""
        base, _, admin = run.url.partition("/?token=")
        status, body = http(base + "/api/session", headers={"Authorization": "Bearer " + admin})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["role"], "admin")
        viewer = body["viewer_url"].partition("/?token=")[2]
        status, body = http(base + "/api/session", headers={"Authorization": "Bearer " + viewer})
        self.assertEqual((status, body["role"]), (200, "viewer"))
        self.assertNotIn("viewer_url", body)
        return viewer

    def test_ui_off_and_refused_addresses(self):
        tmp = tempfile.mkdtemp(prefix="tunehost-webui-")
        config = write_experiment(tmp, 1, 1)
        for ui in ("0.0.0.0:0", "nonsense", "127.0.0.1:70000"):
            proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins",
                                   harness.PLUGIN_DIR, "--ui", ui],
                                  cwd=tmp, capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertIn("--ui " + ui, proc.stderr)
        self.assertIn("ssh -L", subprocess.run(
            [harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR, "--ui",
             "0.0.0.0:0"], cwd=tmp, capture_output=True, text=True, timeout=60).stderr)
        # A certificate without its key (and the reverse) is a usage error.
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
                               "--ui-cert", config], cwd=tmp, capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        open(os.path.join(tmp, "release", "all"), "w").close()
        # Every address, with --insecure: reached by any name, still behind the token.
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
                               "--ui", "0.0.0.0:0", "--insecure", "--id", "anyaddr"],
                              cwd=tmp, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("web UI       http://", proc.stdout)
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
                               "--ui", "off", "--id", "noui"],
                              cwd=tmp, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertNotIn("web UI", proc.stdout)


class WebUiTlsTest(unittest.TestCase):
    """--ui-cert/--ui-key: HTTPS, and with it an address beyond loopback."""

    def test_https_with_a_certificate(self):
        if shutil.which("openssl") is None:
            self.skipTest("openssl is not installed")
        tmp = tempfile.mkdtemp(prefix="tunehost-webui-tls-")
        cert, key = os.path.join(tmp, "ui.crt"), os.path.join(tmp, "ui.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        # A key that is not the certificate's: refused before anything runs.
        wrong = write_experiment(tmp, 1, 1)
        proc = subprocess.run([harness.TUNEHOST, "run", wrong, "--plugins", harness.PLUGIN_DIR,
                               "--ui-cert", cert, "--ui-key", cert],
                              cwd=tmp, capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn("cannot use the certificate", proc.stderr)

        # Beyond loopback without --insecure, since it speaks TLS.
        run = RunningExperiment(max_trials=1, concurrency=1,
                                extra=["--ui", "0.0.0.0:0", "--ui-cert", cert, "--ui-key", key])
        self.addCleanup(run.close)
        self.assertTrue(run.url.startswith("https://"), run.url)
        port = run.url.split("/?token=")[0].rsplit(":", 1)[1]
        token = run.url.split("/?token=")[1]
        context = ssl.create_default_context(cafile=cert)
        request = urllib.request.Request("https://127.0.0.1:%s/api/status" % port,
                                         headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            self.assertEqual(json.load(reply)["experiment_id"], "webui")
        # The cookie is Secure.
        no_redirect = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context), NoRedirect())
        try:
            no_redirect.open("https://127.0.0.1:%s/?token=%s" % (port, token), timeout=10)
            self.fail("expected a redirect")
        except urllib.error.HTTPError as e:
            self.assertEqual(e.code, 303)
            self.assertIn("Secure", e.headers["Set-Cookie"])
        # Plain HTTP gets no page.
        with self.assertRaises(Exception):
            urllib.request.urlopen("http://127.0.0.1:%s/api/status" % port, timeout=5).read()
        self.assertEqual(run.finish()["status"], "DONE")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


@require_browser
class WebUiBrowserTest(unittest.TestCase):
    """The page of a running experiment, a viewed one and a report, in chromium."""

    def setUp(self):
        self.profile = tempfile.mkdtemp(prefix="tunehost-chromium-")
        self.addCleanup(shutil.rmtree, self.profile, True)
        self.driver = start_browser(self.profile)
        self.addCleanup(quit_browser, self.driver)

    def wait_js(self, script, what, timeout=30):
        return harness.wait_for(lambda: self.driver.execute_script(script), timeout, what)

    def rows(self):
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#trials tbody tr[data-trial-id]'))"
            ".map(r => [r.dataset.trialId, r.dataset.status]);")

    def points(self, chart="chart-history"):
        return self.driver.execute_script(
            "const c = (window.tunehostCharts || {})[arguments[0]];"
            "return c ? c.data.datasets[0].data.length : -1;", chart)

    def test_live_experiment_updates_and_kills(self):
        run = RunningExperiment(max_trials=6, concurrency=2)
        self.addCleanup(run.close)
        self.driver.get(run.url)
        self.wait_js("return document.body.dataset.loaded === '1';", "the first render")
        # The token became a cookie and left the address bar.
        self.assertNotIn("token", self.driver.current_url)
        self.wait_js("return document.querySelectorAll("
                     "'#trials tbody tr[data-status=\"RUNNING\"]').length === 2;",
                     "two running trials")
        self.assertEqual(self.points(), 0)
        first = [t for t, s in self.rows() if s == "RUNNING"]

        # One trial succeeds: its point appears in the history, live.
        run.release(first[0])
        self.wait_js("return document.querySelector('#trials tbody tr[data-trial-id=\"%s\"]')"
                     ".dataset.status === 'SUCCEEDED';" % first[0], "the released trial")
        harness.wait_for(lambda: self.points() == 1, 15, "one point in the history")
        # A new trial took its slot and appeared without a reload.
        harness.wait_for(lambda: len(self.rows()) >= 3, 30, "a new trial row")
        self.assertEqual(self.driver.execute_script(
            "return window.tunehostCharts['chart-intermediate'].data.datasets.length;") >= 1,
            True)

        # Kill the other running trial from the UI.
        self.driver.find_element(
            "css selector", 'button.kill[data-trial-id="%s"]' % first[1]).click()
        self.wait_js("return document.querySelector('#trials tbody tr[data-trial-id=\"%s\"]')"
                     ".dataset.status === 'USER_CANCELED';" % first[1], "the killed trial")
        screenshot(self.driver, "live-experiment")
        self.assertEqual(severe(self.driver), [])
        # Leave the page before its host goes away (its polls would fail then).
        self.driver.get("about:blank")
        severe(self.driver)

        summary = run.finish()
        statuses = {t["trial_id"]: t["status"] for t in summary["trials"]}
        self.assertEqual(statuses[first[1]], "USER_CANCELED")
        self.assertEqual(statuses[first[0]], "SUCCEEDED")
        self.assertEqual(len(statuses), 6)

        # The finished experiment, viewed read-only, then as an offline report.
        self.check_view(run, summary)
        self.check_report(run, summary)

    def check_view(self, run, summary):
        out = open(os.path.join(run.tmp, "view.out"), "w+")
        view = subprocess.Popen([harness.TUNEHOST, "view", "webui", "--workdir", run.tmp],
                                stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            host = harness.host_file(run.dir, view.pid, timeout=60)
            self.driver.get(host["ui"])
            self.wait_js("return document.body.dataset.loaded === '1';", "the viewed page")
            self.assertEqual(len(self.rows()), len(summary["trials"]))
            self.assertEqual(self.driver.execute_script(
                "return document.querySelectorAll('button.kill').length;"), 0)
            succeeded = [t for t in summary["trials"] if t["status"] == "SUCCEEDED"]
            self.assertEqual(self.points(), len(succeeded))
            screenshot(self.driver, "viewed-experiment")
            self.assertEqual(severe(self.driver), [])
        finally:
            # Leave the page before its host goes away (as above).
            self.driver.get("about:blank")
            severe(self.driver)
            view.terminate()
            view.wait(timeout=30)
            out.close()

    def check_report(self, run, summary):
        report = os.path.join(run.tmp, "report.html")
        proc = subprocess.run([harness.TUNEHOST, "report", "webui", "--workdir", run.tmp,
                               "-o", report], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        with open(report, encoding="utf-8") as f:
            page = f.read()
        # Self-contained: no script or style from anywhere.
        self.assertFalse("<script src" in page or 'rel="stylesheet"' in page,
                         "the report loads a file")
        self.driver.get("file://" + report)
        self.wait_js("return document.body.dataset.loaded === '1';", "the report")
        self.assertEqual(len(self.rows()), len(summary["trials"]))
        succeeded = [t for t in summary["trials"] if t["status"] == "SUCCEEDED"]
        self.assertEqual(self.points(), len(succeeded))
        self.assertIn("DONE", self.driver.find_element("id", "overview").text)
        # Markup in names and values is text (also inlined in the file).
        table = self.driver.find_element("id", "trials").get_attribute("textContent")
        self.assertIn(HOSTILE_NAME, table)
        self.assertIn(HOSTILE_VALUE, table)
        screenshot(self.driver, "report")
        self.assertEqual(severe(self.driver), [])

    def test_pareto_front_of_a_multi_objective_experiment(self):
        # nsga2 with two objectives and a constraint; each result also has a
        # key that is markup, which the page must show as text.
        tmp = tempfile.mkdtemp(prefix="tunehost-webui-pareto-")
        with open(os.path.join(tmp, "trial.py"), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent("""
                import nni
                p = nni.get_next_parameter()
                nni.report_final_result({"default": p["x"], "f1": p["x"],
                                         "f2": (1 - p["x"]) ** 2, "c": 0.1 - p["x"], %s: 1})
                """ % json.dumps(HOSTILE_NAME)))
        config = os.path.join(tmp, "experiment.yaml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent("""
                searchSpace: {x: {_type: uniform, _value: [0, 1]}}
                trialCommand: %s trial.py
                trialCodeDirectory: %s
                experimentWorkingDirectory: %s
                trialConcurrency: 2
                maxTrialNumber: 10
                tuner: {name: nsga2, classArgs: {objectives: {f1: minimize, f2: minimize},
                                                 constraints: [c], population_size: 4, seed: 2}}
                """ % (sys.executable, tmp, tmp)))
        summary_file = os.path.join(tmp, "summary.json")
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
                               "--id", "pareto", "--summary-json", summary_file],
                              cwd=tmp, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        with open(summary_file, encoding="utf-8") as f:
            front = json.load(f)["pareto_front"]
        self.assertTrue(front)
        view = subprocess.Popen([harness.TUNEHOST, "view", "pareto", "--workdir", tmp],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            host = harness.host_file(os.path.join(tmp, "pareto"), view.pid, timeout=60)
            self.driver.get(host["ui"])
            self.wait_js("return document.body.dataset.loaded === '1';", "the viewed page")
            self.wait_js("return !document.getElementById('pareto').hidden;", "the front")
            shown = self.driver.execute_script(
                "return Array.from(document.querySelectorAll('#pareto tbody tr'))"
                ".map(r => r.dataset.trialId);")
            self.assertEqual(sorted(shown), sorted(front))
            text = self.driver.find_element("id", "pareto").get_attribute("textContent")
            self.assertIn("%d trial(s)" % len(front), text)
            self.assertIn(json.dumps(HOSTILE_NAME), text)
            # The overview names the objectives instead of one optimize mode
            # and best trial; the table has a column per objective; the chart
            # puts every front member on the two objectives.
            texts = self.driver.execute_script(
                "return ['ov-mode-label', 'ov-mode', 'ov-best-label', 'ov-best']"
                ".map(id => document.getElementById(id).textContent);")
            self.assertEqual(texts[:3], ["Objectives", "f1 (minimize), f2 (minimize)",
                                         "Pareto front"])
            self.assertTrue(texts[3].startswith("%d trial(s)" % len(front)), texts[3])
            heads = self.driver.execute_script(
                "return Array.from(document.querySelectorAll('#pareto thead th'))"
                ".map(h => h.textContent);")
            self.assertEqual(heads, ["Trial", "#", "f1 ↓", "f2 ↓", "Final result"])
            self.wait_js("return !document.getElementById('pareto-chart-box').hidden && "
                         "!!window.tunehostCharts['chart-pareto'];", "the front's chart")
            counts = self.driver.execute_script(
                "return window.tunehostCharts['chart-pareto'].data.datasets"
                ".map(s => s.data.length);")
            self.assertEqual(counts[0], len(front))
            self.assertEqual(sum(counts), 10, "every trial succeeded with both objectives")
            history = self.driver.execute_script(
                "return window.tunehostCharts['chart-history'] ? "
                "window.tunehostCharts['chart-history'].data.datasets.length : -1;")
            self.assertIn(history, (-1, 1), "no best-so-far line with several objectives")
            screenshot(self.driver, "pareto-front")
            self.assertEqual(severe(self.driver), [])
        finally:
            self.driver.get("about:blank")
            severe(self.driver)
            view.terminate()
            view.wait(timeout=30)


if __name__ == "__main__":
    unittest.main()
