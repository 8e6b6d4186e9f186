module cloudcore.test/go-beehive

go 1.21

require (
	github.com/kubeedge/beehive v1.13.0
	k8s.io/klog/v2 v2.9.0
)

require (
	github.com/go-logr/logr v0.4.0 // indirect
	github.com/google/uuid v1.2.0 // indirect
	gopkg.in/yaml.v2 v2.2.8 // indirect
	sigs.k8s.io/yaml v1.2.0 // indirect
)
