"""The README's screenshots of the MLflow UI, taken in a real browser (headless Chromium).

    pip install -e ".[screenshot]"                       # selenium
    apt-get install chromium chromium-driver             # Debian's browser and its driver
    python docs/screenshots/take.py                      # about 2 minutes on 2 cores

It starts an `mlflow server` in a temporary folder, runs the quickstart against it
(sweeps/quickstart.yaml, no report), opens the runs table the sweep's closing line links to,
and the validation loss against tokens of one budget's runs (filter on the C_budget param,
chart view, that chart full screen), writes runs.png and val_loss_by_tokens.png here, and
stops the server. Nothing outside the temporary folder is written but the two images.
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
import urllib.parse
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="1.5e+11", help="C_budget of the overlaid runs")
    parser.add_argument("--out", type=Path, default=HERE, help="folder of the two PNGs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ui-shot-") as tmp:
        folder = Path(tmp)
        port = free_port()
        server = start_server(folder, port)
        base = f"http://127.0.0.1:{port}"
        try:
            env = {**os.environ, "MLFLOW_TRACKING_URI": base, "RAY_TMPDIR": str(folder / "ray")}
            subprocess.run([sys.executable, "-m", "pipeline.sweep",
                            str(ROOT / "sweeps" / "quickstart.yaml"), "--no-report"],
                           cwd=folder, env=env, check=True)
            from mlflow import MlflowClient

            exp = MlflowClient(tracking_uri=base).get_experiment_by_name("quickstart")
            runs = f"{base}/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
            budget = urllib.parse.quote(f'params.C_budget = "{args.budget}"')
            shoot(runs, args.out / "runs.png", folder / "p1", None, (1500, 820))
            shoot(f"{runs}&searchFilter={budget}&compareRunsMode=CHART",
                  args.out / "val_loss_by_tokens.png", folder / "p2", "by_tokens/val_loss",
                  (1500, 760))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    print(f"wrote {args.out / 'runs.png'} and {args.out / 'val_loss_by_tokens.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
