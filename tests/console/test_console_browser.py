"""The console in a real browser (Debian's chromium driven by Playwright) against a live kbroker with data:
each page clicked through, its content and its accessible roles asserted, and a screenshot kept as an artefact
(under $KBROKER_TEST_ARTEFACTS/console, else pytest's tmp dir; KBROKER_CONSOLE_DOCS_SCREENSHOTS=1 also writes
docs/img/console-*.png)."""

from __future__ import annotations

import datetime
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import COMMITTED_OFFSET, EVENTS, GROUP, LATE_MS, ORDERS, ORDERS_PER_PARTITION

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install 'kbroker[test]'")
expect = sync_api.expect

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator:
    # Playwright gives each launch a fresh temporary profile (user data dir) of its own
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    root = os.environ.get("KBROKER_TEST_ARTEFACTS")
    folder = Path(root) / "console" if root else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser, live_console) -> Iterator:
    context = browser.new_context(viewport={"width": 1280, "height": 860}, timezone_id="UTC")
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    opened.goto(live_console.url)
    yield opened
    context.close()


def screenshot(page, artefacts: Path, name: str) -> None:
    """Keep what the page looked like; with KBROKER_CONSOLE_DOCS_SCREENSHOTS=1 also for docs/console.md."""
    path = artefacts / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("KBROKER_CONSOLE_DOCS_SCREENSHOTS") == "1":
        shutil.copyfile(path, DOCS_IMG / path.name)


def open_section(page, name: str) -> None:
    page.get_by_role("navigation", name="Sections").get_by_role("link", name=name).click()


def test_brokers_page_shows_each_broker_and_the_controller(page, artefacts):
    expect(page.get_by_role("heading", level=1, name="Brokers")).to_be_visible()
    expect(page.get_by_role("main")).to_be_visible()
    brokers = page.get_by_role("table", name="Brokers of the cluster")
    expect(brokers.get_by_role("columnheader", name="Broker id")).to_be_visible()
    expect(brokers.get_by_role("row").nth(1)).to_contain_text("controller")
    expect(page.get_by_role("link", name="Brokers")).to_have_attribute("aria-current", "page")
    screenshot(page, artefacts, "brokers")


def test_topics_page_lists_topics_with_partitions_and_message_counts(page, artefacts):
    open_section(page, "Topics")
    topics = page.get_by_role("table", name=re.compile(r"\d+ topics"))
    orders = topics.get_by_role("row", name=re.compile(rf"^{ORDERS}\b"))
    expect(orders.get_by_role("cell").first).to_have_text("3")
    expect(topics.get_by_role("link", name=EVENTS)).to_be_visible()
    screenshot(page, artefacts, "topics")


def test_topic_page_shows_leaders_isr_offsets_and_configs(page, artefacts):
    open_section(page, "Topics")
    page.get_by_role("link", name=ORDERS).click()
    expect(page.get_by_role("heading", level=1, name=f"Topic {ORDERS}")).to_be_visible()
    partitions = page.get_by_role("table", name="3 partitions")
    for header in ("Leader", "In-sync replicas", "Latest offset"):
        expect(partitions.get_by_role("columnheader", name=header)).to_be_visible()
    expect(partitions.get_by_role("row")).to_have_count(4)
    expect(partitions.get_by_role("row").nth(1).get_by_role("cell").last).to_have_text(re.compile(r"^\d+ B$"))
    expect(page.get_by_text("null", exact=True)).to_have_count(0)
    configs = page.get_by_role("table", name="Topic configuration")
    expect(configs.get_by_role("row", name=re.compile(r"^cleanup\.policy"))).to_contain_text("delete")
    screenshot(page, artefacts, "topic")


def browse_messages(page, **fields: str) -> None:
    page.goto(page.url.split("#")[0] + f"#/topics/{ORDERS}")
    form = page.get_by_role("form", name="Browse messages")
    for label, value in fields.items():
        control = form.get_by_label(label.replace("_", " ").capitalize())
        if label == "partition":
            control.select_option(value)
        else:
            control.fill(value)
    form.get_by_role("button", name="Show messages").click()


def test_message_browser_pretty_prints_json_values_with_keys_and_headers(page, artefacts):
    browse_messages(page, partition="1", from_offset="2", limit="3")
    messages = page.get_by_role("table", name="3 messages from offset 2")
    first = messages.get_by_role("row").nth(1)
    expect(first.get_by_role("rowheader")).to_have_text("2")
    expect(first).to_contain_text("customer-2")
    expect(first).to_contain_text("source: checkout")
    assert '{\n  "order": 102,' in first.locator("pre.json").inner_text()
    screenshot(page, artefacts, "messages")


def test_message_browser_starts_from_a_timestamp(page):
    late = datetime.datetime.fromtimestamp(LATE_MS / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    browse_messages(page, partition="0", from_time=late)
    first_offset = ORDERS_PER_PARTITION // 2
    messages = page.get_by_role("table", name=re.compile(rf"messages from offset {first_offset}$"))
    expect(messages.get_by_role("row").nth(1).get_by_role("rowheader")).to_have_text(str(first_offset))


def test_message_browser_searches_by_key(page):
    browse_messages(page, partition="2", key_contains="customer-7")
    messages = page.get_by_role("table", name=re.compile(r"^1 messages"))
    expect(messages.get_by_role("row").nth(1)).to_contain_text("customer-7")


def test_groups_page_lists_the_group_with_its_state_and_lag(page, artefacts):
    open_section(page, "Consumer groups")
    groups = page.get_by_role("table", name=re.compile(r"consumer groups$"))
    row = groups.get_by_role("row", name=re.compile(rf"^{GROUP}\b"))
    expect(row).to_contain_text("STABLE")
    screenshot(page, artefacts, "groups")


def test_group_page_shows_members_assignments_lag_and_a_lag_chart(page, artefacts):
    open_section(page, "Consumer groups")
    page.get_by_role("link", name=GROUP).click()
    expect(page.get_by_role("heading", level=1, name=f"Consumer group {GROUP}")).to_be_visible()
    members = page.get_by_role("table", name="1 members")
    expect(members).to_contain_text("billing-worker")
    expect(members).to_contain_text(f"{ORDERS}-0, {ORDERS}-1, {ORDERS}-2")
    offsets = page.get_by_role("table", name="Committed offsets")
    expect(offsets.get_by_role("row").nth(1)).to_contain_text(str(COMMITTED_OFFSET))
    chart = page.get_by_role("img", name=re.compile(r"^Total lag over time, \d+ samples"))
    expect(chart).to_be_visible()
    expect(chart.locator("polyline")).to_have_count(1)
    screenshot(page, artefacts, "group")


def test_produce_page_sends_a_test_message_and_reports_its_offset(page, artefacts):
    open_section(page, "Produce")
    form = page.get_by_role("form", name="Produce a test message")
    form.get_by_label("Topic").select_option(EVENTS)
    form.get_by_label("Key", exact=True).fill("from-browser")
    form.get_by_label("Value", exact=True).fill('{"clicked": true}')
    form.get_by_label("Headers (one key=value a line)").fill("origin=playwright")
    form.get_by_role("button", name="Produce").click()
    expect(page.get_by_role("status").filter(has_text="Produced to")).to_have_text(
        re.compile(rf"Produced to {EVENTS} partition 0 at offset \d+\."))
    screenshot(page, artefacts, "produce")


def test_navigation_works_from_the_keyboard(page):
    expect(page.get_by_role("heading", level=1, name="Brokers")).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    topics_link = page.get_by_role("navigation", name="Sections").get_by_role("link", name="Topics")
    while not topics_link.evaluate("link => link === document.activeElement"):
        page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1, name="Topics")).to_be_visible()
