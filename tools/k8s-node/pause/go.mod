// The sandbox ("pause") process of the node test tier (make k8s-node). Standard library only.
module ozone-scm.invalid/tools/k8s-node/pause

go 1.25.0
