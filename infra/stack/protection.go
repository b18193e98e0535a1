package stack

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/customresources"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// TableProtectionID is the construct id of the custom resource that
// switches the table's deletion protection on.
const TableProtectionID = "TableDeletionProtection"

// protectTable switches the metastore's deletion protection on (with
// tableDeletionProtection) through a custom resource that depends on every
// other resource of the stack, so it is the last one a create makes. The
// table itself is created unprotected: a first create that fails anywhere
// rolls back before protection is on and deletes the table, instead of
// failing to delete it and leaving the stack in ROLLBACK_FAILED. Deleting
// the custom resource (the stack is deleted, or tableDeletionProtection is
// turned off) switches protection off again; a retained table is then
// kept unprotected.
func (s *Starlog) protectTable() {
	if !s.Config.TableDeletionProtection {
		return
	}
	st := s.Stack
	set := func(on bool) *customresources.AwsSdkCall {
		return &customresources.AwsSdkCall{
			Service: jsii.String("DynamoDB"),
			Action:  jsii.String("updateTable"),
			Parameters: map[string]any{
				"TableName":                 s.Table.TableName(),
				"DeletionProtectionEnabled": on,
			},
			PhysicalResourceId: customresources.PhysicalResourceId_Of(s.Table.TableName()),
		}
	}
	// Its own log group, deleted with the stack (the provider's default one
	// is retained for two years).
	logs := awslogs.NewLogGroup(st, jsii.String(TableProtectionID+"Logs"), &awslogs.LogGroupProps{
		Retention:     retention(s.Config.LogRetentionDays),
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	cr := customresources.NewAwsCustomResource(st, jsii.String(TableProtectionID), &customresources.AwsCustomResourceProps{
		LogGroup: logs,
		OnCreate: set(true),
		OnUpdate: set(true),
		OnDelete: set(false),
		Policy: customresources.AwsCustomResourcePolicy_FromSdkCalls(&customresources.SdkCallsPolicyOptions{
			Resources: jsii.Strings(*s.Table.TableArn()),
		}),
		InstallLatestAwsSdk: jsii.Bool(false),
	})
	// Last: after every other resource (its own provider function and
	// role aside, which it needs first).
	for _, child := range *st.Node().Children() {
		id := *child.Node().Id()
		if id == TableProtectionID || id == TableProtectionID+"Logs" || strings.HasPrefix(id, "AWS679f53fac002430cb0da5b7982bd2287") {
			continue
		}
		if hasResources(child) {
			cr.Node().AddDependency(child)
		}
	}
}

// hasResources says whether a construct holds CloudFormation resources
// (outputs, parameters and conditions do not).
func hasResources(c constructs.IConstruct) bool {
	for _, d := range *c.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		if *awscdk.CfnResource_IsCfnResource(d) {
			return true
		}
	}
	return false
}
