"""The console at GET /console (topics_actors/gateway/console_files.py): served to anyone
(the page holds no data), it reads the API with the key typed into it, which stays in the
tab and out of every URL; a real browser (Debian's chromium, headless, driven by selenium)
shows a topic appended through the API, and a record appended later appears on it live.

tools/install_services.sh installs chromium and chromium-driver; without them the browser
test is skipped, except under CI, where it fails."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.timeout(60)
READER, ADMIN = "console-reader-key", "console-admin-key"
NODE_ENV = {"TOPICS_API_KEYS": f"{READER}:r,{ADMIN}:rw+d+a"}
NODE_SHARDS = 1
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")


def as_admin(node, method: str, path: str, body=None):
    return node.http(method, path, body, headers={"Authorization": f"Bearer {ADMIN}"})


def test_the_page_and_its_script_need_no_key_and_the_api_still_does(node):
    page = node.http("GET", "/console")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    assert b'<script src="/console/console.js">' in page.body
    script = node.http("GET", "/console/console.js")
    assert script.status == 200 and b"sessionStorage" in script.body
    assert node.http("HEAD", "/console").status == 200
    assert node.http("GET", "/console/other.js").status == 401      # unknown: 401, then 404
    assert node.http("GET", "/v0/topics").status == 401


@pytest.fixture
def browser():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"missing {missing}: tools/install_services.sh installs them")
        pytest.skip(f"missing {missing} (tools/install_services.sh installs them)")
    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def text_of(driver, element_id: str) -> str:
    from selenium.webdriver.common.by import By
    return driver.find_element(By.ID, element_id).text


def use_key(driver, key: str) -> None:
    from selenium.webdriver.common.by import By
    field = driver.find_element(By.ID, "key")
    field.clear()
    field.send_keys(key)
    driver.find_element(By.ID, "key-use").click()


def test_a_browser_shows_a_topic_and_its_new_records_live(node, browser):
    from selenium.webdriver.common.by import By
    assert as_admin(node, "POST", "/v0/topics/console-demo",
                    {"records": [{"data": {"hello": "world"}}]}).status == 201
    browser.get(f"http://127.0.0.1:{node.http_port}/console")
    wait_for(lambda: "lacks the read scope" in text_of(browser, "status"), 10,
             "the page to say it has no key")
    use_key(browser, READER)
    row = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR,
                                                 'tr[data-topic="console-demo"]'), 10,
                   "the topic in the table")[0]
    assert row.text.split()[:2] == ["console-demo", "1"]
    wait_for(lambda: text_of(browser, "mode") == "read-only", 10, "read-only mode")
    assert "admin scope" in text_of(browser, "quarantine-note")
    row.click()
    wait_for(lambda: '{"hello":"world"}' in text_of(browser, "records"), 10, "the record")
    assert not browser.find_element(By.ID, "append").is_displayed()
    assert as_admin(node, "POST", "/v0/topics/console-demo",
                    {"records": [{"data": {"live": 42}}]}).status == 200
    wait_for(lambda: '{"live":42}' in text_of(browser, "records"), 10, "the record, live")
    assert READER not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('topics.console.key')") == READER
    use_key(browser, ADMIN)
    wait_for(lambda: text_of(browser, "mode") == "read-write", 10, "read-write mode")
    wait_for(lambda: "recovery policy" in text_of(browser, "quarantine-note"), 10,
             "the quarantine, for an admin key")
