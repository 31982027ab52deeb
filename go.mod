module github.com/goiwarp/goiwarp

go 1.26.8

require (
	github.com/mattn/go-pointer v0.0.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
