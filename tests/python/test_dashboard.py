"""`--http-port`: the task dashboard, driven in Debian's chromium by Selenium (with
chromium-driver; scripts/setup.sh installs both). A browser signs in with an ACL user, opens
every page, requeues a dead task, deletes another, pauses a queue and quiets a worker through
the UI, and each change is then read back over RESP. A screenshot of each page goes to
target/test-output/dashboard/ (and to docs/dashboard/ with UPDATE_DOCS_SCREENSHOTS=1).

Beside the browser, plain HTTP checks what a browser would not show: a form without its CSRF
token is refused, a user whose ACL forbids writes gets NOPERM from the UI's buttons, and a
wrong password gets no session."""

import http.cookiejar
import os
import random
import re
import shutil
import string
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import redis

from conftest import Server, wait_for
from test_differential import free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHOTS = os.path.join(ROOT, "target", "test-output", "dashboard")
DOCS_SHOTS = os.path.join(ROOT, "docs", "dashboard")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def as_map(reply):
    """A map reply as a dict (RESP2 sends it as a flat array)."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def command_map(r, *args):
    reply = r.execute_command(*args)
    return None if reply is None else as_map(reply)


def suffix():
    return "".join(random.choices(string.ascii_lowercase, k=6))


@pytest.fixture(scope="module")
def world():
    """A 2-shard server with the dashboard, and queues in every state the pages show."""
    os.environ["WETASK_DASHBOARD_SAMPLE_MS"] = "200"
    http_port = free_port()
    srv = Server("--shards", "2", "--appendonly", "no", "--http-port", str(http_port))
    del os.environ["WETASK_DASHBOARD_SAMPLE_MS"]
    r = redis.Redis(port=srv.port, decode_responses=True)
    s = suffix()
    w = {"srv": srv, "r": r, "url": f"http://127.0.0.1:{http_port}",
         "email": f"jobs:email-{s}", "reports": f"jobs:reports-{s}", "private": f"private-{s}"}
    r.execute_command("ACL", "SETUSER", "ops", "on", ">ops-secret", "~jobs:*", "+@task",
                      "+@task-admin", "+@read")
    r.execute_command("ACL", "SETUSER", "viewer", "on", ">viewer-secret", "~*", "&*", "+@all",
                      "-@write")
    email, reports = w["email"], w["reports"]
    for n in range(6):
        r.execute_command("TASK.SUBMIT", email, f'{{"to": "user{n}@example.com"}}', "RETRIES", "0")
    r.execute_command("TASK.SUBMIT", reports, '{"report": "weekly"}', "DELAY", "3600000")
    r.execute_command("TASK.SUBMIT", w["private"], "secret")
    # Three dead tasks (one to requeue, one to delete, one for the viewer), one done with a
    # result, and one held by worker w1 with a log line and progress.
    failer = redis.Redis(port=srv.port, decode_responses=True)
    w["dead"] = []
    for n in range(3):
        task = failer.execute_command("TASK.FETCH", email, "BLOCK", "5000")[0]
        failer.execute_command("TASK.FAIL", task[0], "ERROR", f"smtp refused {n}", "NORETRY")
        w["dead"].append(task[0])
    task = failer.execute_command("TASK.FETCH", email, "BLOCK", "5000")[0]
    failer.execute_command("TASK.ACK", task[0], "RESULT", "sent-ok")
    w["done"] = task[0]
    worker = redis.Redis(port=srv.port, decode_responses=True)
    worker.execute_command("TASK.WORKER", "w1")
    held = worker.execute_command("TASK.FETCH", email, "BLOCK", "5000", "LEASE", "600000")[0]
    worker.execute_command("TASK.LOG", held[0], "rendering the template")
    worker.execute_command("TASK.PROGRESS", held[0], "40")
    w["held"], w["worker"] = held[0], worker
    r.execute_command("TASK.CRON", "SET", "nightly-report", "0 3 * * *", reports, '{"report": "daily"}')
    r.execute_command("TASK.BATCH", f"jobs:batch-{s}", "ON-COMPLETE", reports, "summary",
                      "CHILDREN", email, "a", email, "b")
    r.execute_command("TASK.FLOW", f"jobs:flow-{s}", "PARENT", reports, "merge",
                      "CHILDREN", email, "c")
    w["batch"], w["flow"] = f"jobs:batch-{s}", f"jobs:flow-{s}"
    # A second or two of steady work, for the charts (the sampler reads every 200 ms here).
    thumbs = f"jobs:thumbnails-{s}"
    for n in range(15):
        for _ in range(3):
            r.execute_command("TASK.SUBMIT", thumbs, "image")
        for _ in range(2 + n % 2):
            task = failer.execute_command("TASK.FETCH", thumbs, "BLOCK", "5000")[0]
            failer.execute_command("TASK.ACK", task[0])
        time.sleep(0.1)
    yield w
    worker.close()
    failer.close()
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER), \
        "chromium and chromium-driver are missing: run scripts/setup.sh"
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--window-size=1280,1000"]:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def shot(driver, name):
    os.makedirs(SHOTS, exist_ok=True)
    path = os.path.join(SHOTS, f"{name}.png")
    driver.save_screenshot(path)
    if os.environ.get("UPDATE_DOCS_SCREENSHOTS"):
        os.makedirs(DOCS_SHOTS, exist_ok=True)
        shutil.copy(path, os.path.join(DOCS_SHOTS, f"{name}.png"))


def body(driver):
    from selenium.webdriver.common.by import By
    return driver.find_element(By.TAG_NAME, "body").text


def click(driver, xpath):
    """Clicks the element and waits for the page it leads to."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
    element = driver.find_element(By.XPATH, xpath)
    element.click()
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(element))


# Long: one walk through every page in order, as a user would take it.
def test_a_browser_signs_in_opens_every_page_and_steers_the_queues(world, browser):
    from selenium.webdriver.common.by import By
    d, r, url = browser, world["r"], world["url"]
    email, dead = world["email"], world["dead"]

    d.get(url + "/")
    assert d.current_url.endswith("/login"), "no session: the dashboard asks to sign in"
    shot(d, "login")
    d.find_element(By.ID, "username").clear()
    d.find_element(By.ID, "username").send_keys("ops")
    d.find_element(By.ID, "password").send_keys("wrong")
    click(d, "//button[@type='submit']")
    assert "WRONGPASS" in body(d)
    d.find_element(By.ID, "username").clear()
    d.find_element(By.ID, "username").send_keys("ops")
    d.find_element(By.ID, "password").send_keys("ops-secret")
    click(d, "//button[@type='submit']")
    assert d.title.startswith("Queues"), body(d)
    assert "Signed in as ops" in body(d)

    # Queues: the counts, the charts once the sampler has two rounds, and the queue the
    # ACL keeps from ops marked so.
    def charted():
        d.refresh()
        svg = d.find_element(By.XPATH, "//figure[1]").get_attribute("innerHTML")
        return "<polyline" in svg and f"{email}: " in d.find_element(By.XPATH, "//figure[1]").text
    wait_for(charted, "the depth chart to draw a line")
    stats = command_map(r, "TASK.STATS", email)
    row = d.find_element(By.XPATH, f"//tr[td/a[text()='{email}']]").text
    want = ["running"] + [str(stats[f]) for f in ("queued", "scheduled", "leased", "dead", "acked", "failed")]
    assert row.split()[1:8] == want, row
    assert stats["dead"] == 3 and stats["leased"] == 1 and stats["acked"] == 1
    private = d.find_element(By.XPATH, f"//tr[td/a[text()='{world['private']}']]").text
    assert "not permitted" in private
    shot(d, "queues")

    # One queue, queued tab, and its dead tab.
    click(d, f"//a[text()='{email}']")
    assert d.title.startswith(f"Queue {email}")
    assert len(d.find_elements(By.XPATH, "//tbody/tr")) == stats["queued"]
    shot(d, "queue")
    click(d, "//a[starts-with(text(), 'dead')]")
    text = body(d)
    for task_id in dead:
        assert task_id in text
    assert "smtp refused 0" in text
    shot(d, "dead")

    # A dead task's detail, then requeue it through the UI; RESP sees it queued again.
    click(d, f"//a[code[text()='{dead[0]}']]")
    text = body(d)
    assert d.title.startswith(f"Task {dead[0]}")
    assert "user0@example.com" in text and "smtp refused 0" in text and "dead" in text
    shot(d, "task-dead")
    click(d, "//button[text()='Requeue']")
    assert "1 task requeued" in body(d)
    assert command_map(r, "TASK.GET", dead[0])["state"] == "queued"

    # Delete another dead task from the dead tab.
    d.get(url + "/queue?" + urllib.parse.urlencode({"name": email, "state": "dead"}))
    click(d, f"//tr[td/a/code[text()='{dead[1]}']]//button[text()='Delete']")
    assert "1 task deleted" in body(d)
    assert r.execute_command("TASK.GET", dead[1]) is None
    assert r.execute_command("TASK.DEAD", email) == [dead[2]]

    # The held task: its log line, progress and holder.
    d.get(url + "/task?" + urllib.parse.urlencode({"id": world["held"]}))
    text = body(d)
    assert "rendering the template" in text and "40" in text and "worker:" in text
    shot(d, "task-leased")

    # Pause the queue from the queues page.
    d.get(url + "/")
    click(d, f"//tr[td/a[text()='{email}']]//button[text()='Pause']")
    assert f"Paused {email}." in body(d)
    assert command_map(r, "TASK.STATS", email)["paused"] == 1
    d.find_element(By.XPATH, f"//tr[td/a[text()='{email}']]//button[text()='Resume']")

    # Workers: w1 with the task it holds; quiet it.
    click(d, "//nav//a[text()='Workers']")
    text = body(d)
    assert "w1" in text and world["held"] in text and "worker w1" in text
    shot(d, "workers")
    click(d, "//tr[td[text()='w1']]//button[text()='Quiet']")
    assert "Quieted worker w1." in body(d)
    workers = [as_map(w) for w in r.execute_command("TASK.WORKERS")]
    assert [w["quiet"] for w in workers if w["name"] == "w1"] == [1]

    # Cron, batches and flows.
    click(d, "//nav//a[text()='Cron']")
    text = body(d)
    assert "nightly-report" in text and "0 3 * * *" in text
    shot(d, "cron")
    click(d, "//nav//a[text()='Batches and flows']")
    text = body(d)
    assert world["batch"] in text and world["flow"] in text
    assert re.search(r"batch\s+running\s+2", text) and re.search(r"flow\s+running\s+1", text)
    shot(d, "batches")
    click(d, f"//a[code[text()='{world['flow']}']]")
    assert "The flow's children" in body(d)
    shot(d, "flow")

    # Signing out ends the session.
    click(d, "//button[text()='Sign out']")
    assert d.current_url.endswith("/login")
    d.get(url + "/workers")
    assert d.current_url.endswith("/login")


class Session:
    """Plain HTTP with a cookie jar, for what a browser hides."""

    def __init__(self, url):
        self.url = url
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path):
        try:
            with self.opener.open(self.url + path, timeout=30) as response:
                return response.status, response.geturl(), response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, path, e.read().decode()

    def post(self, path, fields):
        data = urllib.parse.urlencode(fields).encode()
        try:
            with self.opener.open(self.url + path, data=data, timeout=30) as response:
                return response.status, response.geturl(), response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, path, e.read().decode()

    def csrf(self, page):
        return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)


def test_forms_need_their_token_and_the_acl_decides_what_a_user_may_do(world):
    r, dead = world["r"], world["dead"][2]
    s = Session(world["url"])
    status, _, page = s.post("/login", {"username": "viewer", "password": "nope"})
    assert status == 401 and "WRONGPASS" in page
    status, where, page = s.post("/login", {"username": "viewer", "password": "viewer-secret"})
    assert status == 200 and where.endswith("/") and "Signed in as <strong>viewer</strong>" in page
    token = s.csrf(page)

    # No token, or a wrong one: refused, and nothing changes.
    back = "/task?id=" + urllib.parse.quote(dead)
    status, _, _ = s.post("/action", {"op": "requeue", "id": dead, "back": back})
    assert status == 403
    status, _, _ = s.post("/action", {"op": "requeue", "id": dead, "back": back, "csrf": "0" * 32})
    assert status == 403
    # With the token, the viewer's ACL (+@all -@write) refuses the write.
    status, _, page = s.post("/action", {"op": "requeue", "id": dead, "back": back, "csrf": token})
    assert status == 200 and "NOPERM" in page, page
    assert command_map(r, "TASK.GET", dead)["state"] == "dead"
    # An action never sends the browser off the site.
    status, where, _ = s.post("/action", {"op": "pause", "queue": "x", "csrf": token,
                                          "back": "//example.com/"})
    assert urllib.parse.urlparse(where).netloc == urllib.parse.urlparse(world["url"]).netloc

    # A bad argument in a link gets the server's error on the page, and the session goes on.
    bad = "/queue?" + urllib.parse.urlencode({"name": world["email"], "cursor": "garbage"})
    status, _, page = s.get(bad)
    assert status == 400 and "ERR invalid cursor" in page, page
    status, where, page = s.get("/")
    assert status == 200 and where.endswith("/") and "Signed in as <strong>viewer</strong>" in page

    # ACL DELUSER closes the user's connections: its dashboard session ends with them.
    r.execute_command("ACL", "DELUSER", "viewer")
    status, _, page = s.get("/")
    assert status == 503 or "Sign in" in page
    status, where, _ = s.get("/")
    assert where.endswith("/login")
