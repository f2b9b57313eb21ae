# Audit an Ubuntu image built on EC2 and fix it before it is captured.
packer {
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.3.0"
    }
    amilint = {
      source  = "github.com/amilint/amilint"
      version = ">= 0.1.0"
    }
  }
}

source "amazon-ebs" "gpu-node" {
  region        = "us-east-1"
  instance_type = "g5.xlarge"
  ssh_username  = "ubuntu"
  ami_name      = "k8s-gpu-node-{{timestamp}}"
  source_ami_filter {
    filters = {
      name = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 20.04)*"
    }
    owners      = ["amazon"]
    most_recent = true
  }
}

build {
  sources = ["source.amazon-ebs.gpu-node"]

  provisioner "amilint" {
    # Disable or mask what policy rejects, then fail the build if anything
    # at or above fail_on remains.
    mode    = "fix"
    fail_on = "high"
    # Everything else that starts at boot is reported.
    profile = "k8s-gpu-node"
    # The SSH user is not root: run amilint with sudo.
    execute_command = "chmod 0755 {{.Path}} && sudo -n {{.Vars}} {{.Path}} {{.Args}}"
    waivers         = "waivers.yaml"
    report_path     = "reports"
    report_formats  = ["json", "sarif", "junit", "html"]
  }
}
