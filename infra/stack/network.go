package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/jsii-runtime-go"
)

// network builds the VPC over the three configured zones: public subnets
// for the NAT gateways (and an internet-facing NLB), private subnets for
// the stars. Gateway endpoints keep the data path (S3, S3 Express,
// DynamoDB) off the NAT gateways, which bill per GB.
func (s *Starlog) network() {
	c := s.Config
	s.Vpc = awsec2.NewVpc(s.Stack, jsii.String("Vpc"), &awsec2.VpcProps{
		IpAddresses:       awsec2.IpAddresses_Cidr(jsii.String(c.VPCCIDR)),
		AvailabilityZones: jsii.Strings(c.AvailabilityZones...),
		NatGateways:       jsii.Number(float64(c.NATGateways)),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String("public"), SubnetType: awsec2.SubnetType_PUBLIC},
			{Name: jsii.String("stars"), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		},
		GatewayEndpoints: &map[string]*awsec2.GatewayVpcEndpointOptions{
			"S3":        {Service: awsec2.GatewayVpcEndpointAwsService_S3()},
			"S3Express": {Service: awsec2.GatewayVpcEndpointAwsService_S3_EXPRESS()},
			"DynamoDB":  {Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB()},
		},
		RestrictDefaultSecurityGroup: jsii.Bool(true),
	})
}
