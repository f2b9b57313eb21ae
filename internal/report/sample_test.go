package report

import (
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// ecsChain is the chain the incident's image had: the .wants link a package
// postinst created under /etc.
var ecsChain = []unit.Edge{
	{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/lib/systemd/system/default.target"},
	{From: "multi-user.target", To: "ecs.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/ecs.service"},
}

// sampleReport is a realistic DLAMI-like scan: the unused ECS agent (high,
// with its chain), its crash-loop restart policy (medium), a timer-started
// unit (low), and a waived SSM agent finding.
func sampleReport() *finding.Report {
	return finding.NewReport(finding.Target{Name: "dlami-ubuntu-20.04", Kind: "dir", OS: "Ubuntu 20.04.6 LTS"}, []finding.Finding{
		{
			RuleID:   "ecs-agent-unused",
			Title:    "Amazon ECS agent enabled without an ECS cluster",
			Severity: finding.High,
			Unit:     "ecs.service",
			Message:  "ecs.service starts at boot but /etc/ecs/ecs.config names no ECS_CLUSTER; the agent will crash-loop and leak memory cgroups.",
			Chain:    ecsChain,
			Remediation: finding.Remediation{Action: "disable", Units: []string{"ecs.service"},
				Text: "Disable the unit in the base image, then reboot hosts built from it to purge leaked cgroups."},
			References: []string{"https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html"},
			Evidence:   map[string]any{"fragment": "/lib/systemd/system/ecs.service", "ECS_CLUSTER": ""},
		},
		{
			RuleID:   "restart-crash-loop",
			Title:    "Restart policy never trips the start limit",
			Severity: finding.Medium,
			Unit:     "ecs.service",
			Message:  "Restart=always with RestartSec=10s: 5 starts take 50s, longer than StartLimitIntervalSec=10s, so the unit restarts forever.",
			Chain:    ecsChain,
			Remediation: finding.Remediation{Action: "configure", Units: []string{"ecs.service"},
				Text: "Set StartLimitIntervalSec above RestartSec × StartLimitBurst, or disable the unit."},
			Evidence: map[string]any{"fragment": "/lib/systemd/system/ecs.service", "restart": "always", "restart_sec": 10, "start_limit_burst": 5, "start_limit_interval_sec": 10},
		},
		{
			RuleID:   "motd-news",
			Title:    "motd-news fetches news from the network on every boot",
			Severity: finding.Low,
			Unit:     "motd-news.service",
			Message:  "motd-news.service is started by motd-news.timer and reaches out to motd.ubuntu.com.",
			Chain: []unit.Edge{
				{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/lib/systemd/system/default.target"},
				{From: "multi-user.target", To: "timers.target", Kind: "Wants"},
				{From: "timers.target", To: "motd-news.timer", Kind: ".wants", Source: "/etc/systemd/system/timers.target.wants/motd-news.timer"},
				{From: "motd-news.timer", To: "motd-news.service", Kind: "timer"},
			},
			Remediation: finding.Remediation{Action: "mask", Units: []string{"motd-news.timer", "motd-news.service"}},
		},
		{
			RuleID:   "ssm-agent-unconfigured",
			Title:    "Amazon SSM agent without configuration",
			Severity: finding.Medium,
			Unit:     "amazon-ssm-agent.service",
			Message:  "amazon-ssm-agent.service starts at boot and /etc/amazon/ssm/amazon-ssm-agent.json is missing.",
			Chain: []unit.Edge{
				{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/lib/systemd/system/default.target"},
				{From: "multi-user.target", To: "amazon-ssm-agent.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/amazon-ssm-agent.service"},
			},
			Remediation: finding.Remediation{Action: "disable", Commands: []string{"systemctl disable amazon-ssm-agent.service"}},
			Waived:      true,
			Waiver:      &finding.Waiver{Reason: "fleet uses SSM Session Manager with the default registration", Expires: "2026-12-31"},
		},
	})
}

// sampleLive is a live reading of an incident host: 8 cores, core 5 pinned
// in system time while serving the NIC's interrupts, and zombie memcgs.
func sampleLive() *Live {
	cores := make([]Core, 8)
	for i := range cores {
		cores[i] = Core{CPU: i, User: 0.12 + 0.01*float64(i), System: 0.05, IRQ: 0.01, SoftIRQ: 0.02}
	}
	cores[5] = Core{CPU: 5, User: 0.0, System: 0.97, IRQ: 0.01, SoftIRQ: 0.02, NICs: []string{"eth0"}}
	return &Live{Host: "ip-10-0-3-17", Cores: cores,
		Memcg: &Memcg{Tracked: 70312, Present: 241, Zombies: 70071, Leaking: "system.slice/ecs.service"}}
}
