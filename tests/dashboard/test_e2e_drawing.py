"""How nodes are drawn, measured in Debian's headless Chromium against a real web process: a MIG
node's bar counts its slices per profile (used and free), a GPU's number sits clear of every
share sliver in dark text on the light frame, and every PCIe switch carries its name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model

from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources, SharingMode
from scheduling.models import Node
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.builders import make_node
from tests.dashboard.servers import web_server
from tests.dashboard.test_e2e import artifacts, browser, in_thread, pytestmark, sign_in  # noqa: F401
from tests.scheduling import factories

MIG_LAYOUT = ("3g.40gb", "1g.10gb", "1g.10gb")


def setup_world() -> None:
    """A MIG node (two A100s, each 3g.40gb + 2 × 1g.10gb) with three 1g.10gb slices held; a
    time-sliced L40S node (PCIe switches, two GPUs per switch) whose GPU 0 is shared by three
    pods; an admin."""
    services.node_register(
        spec=make_node("mig-0").mig(MIG_LAYOUT, MIG_LAYOUT).build(), source=Node.Source.SIMULATOR
    )
    services.node_register(
        spec=make_node("l40s-0")
        .topology("pcie-8gpu-2socket", model="L40S", sharing=SharingMode.TIME_SLICING)
        .build(),
        source=Node.Source.SIMULATOR,
    )
    tenant = factories.tenant("inference")
    slice_template = PodTemplate(
        resources=Resources(cpu_milli=1000, memory_mib=1024, mig_profile="1g.10gb", mig_count=1)
    )
    for k in range(3):
        services.workload_submit(
            tenant=tenant,
            name=f"slice-{k}",
            pod_sets=[services.PodSetSpec(name="main", count=1, template=slice_template)],
        )
    for k in range(3):
        factories.workload(tenant, f"share-{k}", gpu_milli=250)
    database_cycle(Framework(load_profile("topology")), identity="drawing").run_once()
    admin = get_user_model().objects.create_user("admin", password="e2e-password-1")
    admin.is_staff = admin.is_superuser = True
    admin.save()


# In the browser: each GPU of a drawn node, its number's box and the boxes of what is drawn in it.
GPU_GEOMETRY = """(svg) => [...svg.querySelectorAll("g.gpu")].map((g) => {
  const box = (e) => { const b = e.getBBox(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
  const number = g.querySelector("text.gpu-number");
  return {
    gpu: g.dataset.gpu,
    number: box(number),
    fill: number.getAttribute("fill"),
    frame: g.querySelector("rect.frame").getAttribute("fill"),
    drawn: [...g.querySelectorAll("rect.share, rect.slice")].map(box),
  };
})"""

SWITCHES = """(svg) => [...svg.querySelectorAll("rect.switch")].map((r, k) => {
  const b = r.getBBox();
  const label = svg.querySelectorAll("text.switch-label")[k];
  const l = label.getBBox();
  return {box: [b.x, b.y, b.width, b.height], label: label.textContent,
          inside: l.x >= b.x && l.x + l.width <= b.x + b.width && l.y >= b.y,
          title: r.querySelector("title").textContent};
})"""


def luminance(hex_color: str) -> float:
    channels = [int(hex_color[k : k + 2], 16) / 255 for k in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_mig_bars_numbers_and_switches_read_clearly(
    browser: Any,  # noqa: F811
    artifacts: Path,  # noqa: F811
) -> None:
    in_thread(setup_world)
    with web_server(log=artifacts / "web-drawing.log") as base:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{base}/login/")
        sign_in(page)
        page.wait_for_selector("article.node-card svg.topo")

        # The MIG node: no "0/0" GPU bar, its slices per profile instead.
        card = page.locator('article[data-node="mig-0"]')
        meters = card.locator(".meters").inner_text()
        assert "0/0" not in meters and "MIG" in meters and "3/6" in meters
        assert card.locator(".mig-profiles").inner_text().split(" slices")[0] == (
            "1g.10gb 3/4 · 3g.40gb 0/2"
        )
        segments = card.locator(".mig-meter .segment")
        assert segments.count() == 2
        assert segments.nth(0).get_attribute("title") == "1g.10gb: 3 of 4 used, 1 free"
        fill = segments.nth(0).locator("span").evaluate("e => e.style.width")
        assert fill == "75%"
        held = card.locator('rect.slice[data-held="1"]')
        assert held.count() == 3
        card.screenshot(path=str(artifacts / "drawing-mig-card.png"))

        # The shared GPU: three slivers, none under its number; the number dark on the frame.
        svg = page.locator('article[data-node="l40s-0"] svg.topo')
        gpus = {g["gpu"]: g for g in svg.evaluate(GPU_GEOMETRY)}
        shared = gpus["0"]
        assert len(shared["drawn"]) == 3
        for gpu in gpus.values():
            bottom = gpu["number"]["y"] + gpu["number"]["h"]
            assert all(bottom <= part["y"] + 0.5 for part in gpu["drawn"]), gpu
            assert contrast(gpu["fill"], gpu["frame"]) >= 7, gpu  # WCAG AAA for small text
        page.locator('article[data-node="l40s-0"]').screenshot(
            path=str(artifacts / "drawing-shared-card.png")
        )

        # Every PCIe switch is named, inside its box, on the card and on the node's page.
        switches = svg.evaluate(SWITCHES)
        assert [s["label"] for s in switches] == ["PCIe 0", "PCIe 1", "PCIe 2", "PCIe 3"]
        assert all(s["inside"] for s in switches)
        assert switches[0]["title"] == "PCIe switch 0: GPU 0, 1"
        page.goto(f"{base}/nodes/l40s-0/")
        page.wait_for_selector("#diagram svg.topo")
        detail = page.locator("#diagram svg.topo").evaluate(SWITCHES)
        assert [s["label"] for s in detail] == ["PCIe 0", "PCIe 1", "PCIe 2", "PCIe 3"]
        page.screenshot(path=str(artifacts / "drawing-node.png"), full_page=True)

        # The MIG node's page says the same counts.
        page.goto(f"{base}/nodes/mig-0/")
        page.wait_for_selector("#mig-slices")
        assert "1g.10gb 3/4 · 3g.40gb 0/2" in page.inner_text("#mig-slices")
        held = [int(n) for n in re.findall(r"(\d)/3 slices", page.inner_text("#gpus"))]
        assert len(held) == 2 and sum(held) == 3  # each GPU's Allocated is its slices held
        assert not errors, errors
