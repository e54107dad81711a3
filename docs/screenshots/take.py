"""The README's screenshots of the MLflow UI, taken in a real browser (headless Chromium).

    pip install -e ".[screenshot]"                       # selenium
    apt-get install chromium chromium-driver             # Debian's browser and its driver
    python docs/screenshots/take.py      # the quickstart, its report, three pages (see below)

It starts an `mlflow server` in a temporary folder, runs the quickstart against it
(sweeps/quickstart.yaml, with its report: 12-23 minutes on 2 cores shared with a training study
on 2026-12-07; its training alone is about 3 minutes on 2 idle cores), opens the runs table the
sweep links to after its summary, and the validation loss against tokens of one budget's runs
(filter on the C_budget param, chart view, that chart full screen), and the report at 1400x900,
where it checks that the answer block (its heading, table and notes) ends within that first
screen (issue 55). It writes runs.png, val_loss_by_tokens.png and report.png here, and stops
the server. Nothing outside the temporary folder is written but the three images.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHROMIUM_FLAGS = [  # as root, offline: no sandbox, no background connections to Google
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    exe = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen(
        [str(exe), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts")],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except OSError:
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("mlflow server did not answer within 120 s")


def browser(width: int, height: int, profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in [*CHROMIUM_FLAGS, f"--window-size={width},{height}",
                 f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def shoot(url: str, out: Path, profile: Path, chart: str | None, size: tuple[int, int]) -> None:
    """Open url, close the assistant panel (and the sidebar), optionally show one chart full
    screen, and save a PNG."""
    from selenium.webdriver.common.by import By

    driver = browser(*size, profile)
    try:
        driver.get(url)
        time.sleep(10)  # the page loads its runs and draws its charts
        driver.find_element(By.CSS_SELECTOR, "button[aria-label='Close']").click()
        driver.find_element(By.CSS_SELECTOR, "button[aria-label='Toggle sidebar']").click()
        time.sleep(1)
        if chart is not None:
            card = driver.find_element(By.XPATH, (
                f"//h4[text()='{chart}']/ancestor::div[.//button[@data-testid="
                "'experiment-view-compare-runs-card-menu']][1]"))
            full_screen = [b for b in card.find_elements(By.TAG_NAME, "button")
                           if not b.get_attribute("data-testid")][0]
            full_screen.click()
            time.sleep(3)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


REPORT_SIZE = (1400, 900)
"""The report's first screen: a laptop browser window (issue 55's check)."""
ANSWER_BOTTOM = """
const h = [...document.querySelectorAll('h2')].find(e => e.textContent.startsWith('Answer at'));
if (!h) return null;
let end = h, e = h.nextElementSibling;
while (e && e.tagName !== 'H2' && e.tagName !== 'P') { end = e; e = e.nextElementSibling; }
return end.getBoundingClientRect().bottom;
"""
"""Where the answer block (the heading "Answer at ...", its table and its list of notes: the
elements up to the next paragraph or heading) ends, in CSS pixels from the top; null without
one."""


def shoot_report(report: Path, out: Path, profile: Path) -> float:
    """Screenshot the report's first screen; return where its answer block ends (pixels).
    Refuses (SystemExit) a report whose answer block is missing or below the first screen."""
    driver = browser(*REPORT_SIZE, profile)
    try:
        # The window size includes the browser's frame: set the page's own viewport instead.
        width, height = REPORT_SIZE
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        driver.get(report.as_uri())
        time.sleep(2)
        bottom = driver.execute_script(ANSWER_BOTTOM)
        height = driver.execute_script("return window.innerHeight")
        driver.save_screenshot(str(out))
    finally:
        driver.quit()
    if bottom is None or bottom > height:
        raise SystemExit(f"{report.name}: the answer block ends at {bottom} px, below the first "
                         f"screen ({height} px of {REPORT_SIZE[0]}x{REPORT_SIZE[1]})")
    return float(bottom)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="1.5e+11", help="C_budget of the overlaid runs")
    parser.add_argument("--out", type=Path, default=HERE, help="folder of the three PNGs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ui-shot-") as tmp:
        folder = Path(tmp)
        port = free_port()
        server = start_server(folder, port)
        base = f"http://127.0.0.1:{port}"
        try:
            env = {**os.environ, "MLFLOW_TRACKING_URI": base, "RAY_TMPDIR": str(folder / "ray")}
            subprocess.run([sys.executable, "-m", "pipeline.sweep",
                            str(ROOT / "sweeps" / "quickstart.yaml")],
                           cwd=folder, env=env, check=True)
            bottom = shoot_report(folder / "reports" / "quickstart" / "report.html",
                                  args.out / "report.png", folder / "p0")
            from mlflow import MlflowClient

            from pipeline.ledger import ui

            exp = MlflowClient(tracking_uri=base).get_experiment_by_name("quickstart")
            runs = ui.runs_url(base, exp.experiment_id)
            budget = ui.runs_url(base, exp.experiment_id, chart=True,
                                 search_filter=ui.budget_filter(float(args.budget)))
            shoot(runs, args.out / "runs.png", folder / "p1", None, (1500, 820))
            shoot(budget, args.out / "val_loss_by_tokens.png", folder / "p2",
                  "by_tokens/val_loss", (1500, 760))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    print(f"wrote {args.out / 'runs.png'}, {args.out / 'val_loss_by_tokens.png'} and "
          f"{args.out / 'report.png'} (its answer block ends at {bottom:.0f} px of the "
          f"{REPORT_SIZE[0]}x{REPORT_SIZE[1]} first screen)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
